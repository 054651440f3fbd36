"""Typed configs as command lines: every field of a dataclass is one flag of the same name.

A config is a dataclass deriving from ``Flags`` whose fields are declared with ``option``::

    @dataclass(kw_only=True)
    class Args(Flags):
        model: str = option(help="hub id or local folder")                  # no default: a required flag
        K_list: list[int] = option([4, 8], help="group sizes", minimum=2)   # list/tuple: nargs="+"
        lr: float = option(1e-3, help="learning rate", above=0)             # bounds: checked twice (below)
        resume: bool = option(False, help="continue the last run")          # bool: a switch (store_true)
        check: bool | None = option(None, help="check (default: by mode)")  # --check, --no-check or None
        save: bool = option(True, help="save the model", zero_one=True)     # --save/--no-save, also --save 0|1
        paths: list[str] = option(help="inputs", positional=True)           # a positional argument (no --)

        def __post_init__(self):
            super().__post_init__()                                         # choices and bounds
            require(..., "one-line message")                                # cross-field checks

``Args.from_argv(argv)`` parses, converts and validates; ``Args(...)`` from Python is validated the same
way in ``__post_init__``. Subcommands (``prog NAME FLAGS...``): ``parse_command({"NAME": Config, ...}, argv)``
returns (NAME, its validated config); each config's docstring's first line is the subcommand's help.
``help`` is the flag's help; the other keywords of ``option`` are argparse's
(``type``, ``nargs``, ``choices``, ``metavar``, ``aliases`` as extra option strings) plus the bounds
``minimum``, ``maximum`` and ``above`` (strictly greater), ``positional=True`` (an argument without ``--``)
and, for a bool that defaults to True, ``zero_one=True`` (the older ``--x 1`` / ``--x 0`` form accepted
beside ``--x`` / ``--no-x``). The argparse ``type`` and ``nargs`` follow from
the annotation when not given (``int``, ``float``, ``str``, ``X | None``, ``list[X]``, ``tuple[X, ...]``).

``python -m grpo_mse.flags --markdown module:Class`` prints the flag table that docs/ shows
(tests/cli/test_flags.py checks that docs and code agree). This module imports only ``grpo_mse.cli``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import os
import re
import sys
from dataclasses import field
from typing import ClassVar

from grpo_mse import cli
from grpo_mse.cli import require

BOUNDS = ("minimum", "maximum", "above")
SCALARS = {"int": int, "float": float, "str": str}


def option(default=dataclasses.MISSING, *, help: str | None = None, **flag):  # noqa: A002 - argparse's name
    """A config field that is also a flag (see the module docstring); list defaults are copied per instance."""
    metadata = {"help": help, **flag}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _annotation_text(spec: dataclasses.Field) -> str:
    """A field's annotation as text without ``| None`` (a string under postponed annotations)."""
    text = spec.type if isinstance(spec.type, str) else str(spec.type)
    text = spec.type.__name__ if type(spec.type) is type else text  # a plain class: "int", not "<class 'int'>"
    return re.sub(r"\s*\|\s*None$|^Optional\[(.*)\]$", r"\1", text.strip())


def _annotation(spec: dataclasses.Field) -> tuple[type | None, str | None, bool]:
    """(scalar type, nargs, is_tuple) read from a field's annotation."""
    text = _annotation_text(spec)
    many = re.match(r"^(list|tuple)\[(\w+)(, \.\.\.)?\]$", text)
    if many:
        return SCALARS.get(many.group(2)), "+", many.group(1) == "tuple"
    return SCALARS.get(text), None, False


def _default(spec: dataclasses.Field):
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return spec.default


def _converter(kind: type | None, bounds: dict):
    """argparse ``type`` of a bounded int or float field (cli.integer / cli.number give one-line errors)."""
    if not bounds:
        return kind
    if kind is int:
        require("above" not in bounds, "an int option takes minimum/maximum bounds")
        return cli.integer(**bounds)
    return cli.number(**bounds)


class SwitchZeroOne(argparse.Action):
    """``--x`` or ``--x 1`` sets a switch, ``--x 0`` clears it (``--no-x``, a store_false flag, clears it too)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs="?", metavar="0|1", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if values not in (None, "1", "0"):
            parser.error(f"argument {option_string}: expected 0, 1 or no value (got {values!r})")
        setattr(namespace, self.dest, values != "0")


def add_flags(parser: argparse.ArgumentParser, config_class) -> None:
    """Add one flag per field of the dataclass ``config_class`` to ``parser``, in field order."""
    specs = dataclasses.fields(config_class)
    used = {kind for spec in specs for kind in ("positional", "zero_one") if spec.metadata.get(kind)}
    require(
        used != {"positional", "zero_one"},  # in "--x 1": is 1 the switch's value or a positional argument?
        f"{config_class.__name__}: a zero_one switch takes an optional value, so no positional field may join it",
    )
    for spec in specs:
        meta = {k: v for k, v in spec.metadata.items() if v is not None}
        bounds = {k: meta.pop(k) for k in BOUNDS if k in meta}
        if getattr(config_class, "BOUNDS_AFTER_PARSE", False):
            bounds = {}  # checked by __post_init__ only
        positional, zero_one = meta.pop("positional", False), meta.pop("zero_one", False)
        names = [spec.name] if positional else [f"--{spec.name}", *meta.pop("aliases", ())]
        default = _default(spec)
        if default is dataclasses.MISSING:
            kind, nargs, _ = _annotation(spec)
            meta.setdefault("type", _converter(kind, bounds))
            if nargs and "nargs" not in meta:
                meta["nargs"] = nargs
            required = {} if positional else {"required": True}  # argparse: a positional is required by itself
            parser.add_argument(*names, **required, **{k: v for k, v in meta.items() if v is not None})
        elif isinstance(default, bool):
            require(not (zero_one and default is False), f"{spec.name}: zero_one is for a bool that defaults to True")
            action = "store_true" if default is False else SwitchZeroOne if zero_one else argparse.BooleanOptionalAction
            parser.add_argument(*names, action=action, default=default, **meta)
            if zero_one:
                parser.add_argument(
                    f"--no-{spec.name}",
                    dest=spec.name,
                    action="store_false",
                    default=default,
                    help=f"turn --{spec.name} off",
                )
        elif default is None and _annotation_text(spec) == "bool":  # --x, --no-x, or neither: None (decided later)
            parser.add_argument(*names, action=argparse.BooleanOptionalAction, default=None, **meta)
        else:
            kind, nargs, _ = _annotation(spec)
            meta.setdefault("type", _converter(kind, bounds))
            if nargs and "nargs" not in meta:
                meta["nargs"] = "*" if positional else nargs  # a positional list with a default may be empty
            shown = list(default) if isinstance(default, tuple) else default
            parser.add_argument(*names, default=shown, **{k: v for k, v in meta.items() if v is not None})


def parser_for(config_class, description: str | None = None) -> cli.ArgumentParser:
    """A cli.ArgumentParser (one-line errors, defaults in --help) with ``config_class``'s flags."""
    parser = cli.ArgumentParser(description=description)
    add_flags(parser, config_class)
    return parser


def _config(config_class, namespace: argparse.Namespace):
    """``config_class`` built (and so validated) from the parsed flags in ``namespace``."""
    values = {}
    for spec in dataclasses.fields(config_class):
        value = getattr(namespace, spec.name)
        values[spec.name] = tuple(value) if isinstance(value, list) and _annotation(spec)[2] else value
    return config_class(**values)


def parse(config_class, argv=None, description: str | None = None):
    """Parse ``argv`` (sys.argv when None) into a validated ``config_class``; bad values raise UsageError."""
    return _config(config_class, parser_for(config_class, description).parse_args(argv))


def parse_command(commands: dict, argv=None, description: str | None = None) -> tuple[str, Flags]:
    """(name, config) of a command line ``NAME FLAGS...``: ``commands`` maps each subcommand's name to its config
    class (its docstring's first line is the subcommand's help), which parses and validates the flags after NAME."""
    parser = cli.ArgumentParser(description=description)
    sub = parser.add_subparsers(dest="command", required=True)  # subparsers are cli.ArgumentParsers too
    for name, config_class in commands.items():
        add_flags(sub.add_parser(name, help=(config_class.__doc__ or "").strip().split("\n")[0]), config_class)
    namespace = parser.parse_args(argv)
    return namespace.command, _config(commands[namespace.command], namespace)


def check_fields(config) -> None:
    """UsageError when a field's value is outside its ``choices`` or bounds (each list item is checked)."""
    for spec in dataclasses.fields(config):
        value = getattr(config, spec.name)
        if value is None or isinstance(value, bool):
            continue
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        choices = spec.metadata.get("choices")
        require(
            choices is None or all(v in choices for v in values),
            f"--{spec.name} must be among {', '.join(map(str, choices or ()))} (got {value})",
        )
        bounds = {k: spec.metadata[k] for k in BOUNDS if spec.metadata.get(k) is not None}
        for item in values if bounds else ():
            cli.check_range(f"--{spec.name}", item, **bounds)


class Flags:
    """Base of a dataclass config whose fields are flags: ``from_argv``, ``add_flags``, ``record``, checks.

    ``__post_init__`` checks choices and bounds; a subclass that adds checks calls ``super().__post_init__()``.
    Bounds are also checked while parsing (``error: argument --x: must be >= 1``) unless the class sets
    ``BOUNDS_AFTER_PARSE = True``: then only ``__post_init__`` checks them (``error: --x must be >= 1``).
    """

    BOUNDS_AFTER_PARSE: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_fields(self)

    def record(self) -> dict:
        """Every field by name (the ``config`` saved with results)."""
        return dataclasses.asdict(self)

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        """One flag per field, in field order."""
        add_flags(parser, cls)

    @classmethod
    def from_argv(cls, argv=None, description: str | None = None):
        """Parse ``argv`` (sys.argv when None) into a validated config; bad values raise UsageError."""
        return parse(cls, argv, description)


REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _shown(value) -> str:
    """A default as docs show it: list items joined by spaces, a path inside the repository relative to it."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return " ".join(str(item).removeprefix(REPOSITORY + os.sep) for item in items)


def markdown(config_class) -> str:
    """The flag table of ``config_class``: flag, default (or "required"), meaning (help, choices, bounds)."""
    lines = ["| flag | default | meaning |", "|---|---|---|"]
    for spec in dataclasses.fields(config_class):
        meta, default = spec.metadata, _default(spec)
        if default is dataclasses.MISSING:
            shown = "required"
        elif isinstance(default, bool):
            shown = "off" if default is False else "on"
        elif default is None:
            shown = "-"
        elif isinstance(default, (list, tuple)) and not default:
            shown = "none"
        else:
            shown = f"`{_shown(default)}`"
        parts = [meta.get("help") or ""]
        if meta.get("choices"):
            many = _annotation(spec)[1] or meta.get("nargs") in ("+", "*")
            parts.append(f"{'any' if many else 'one'} of {', '.join(f'`{c}`' for c in meta['choices'])}")
        bounds = [
            f"{sign} {meta[k]}"
            for k, sign in (("minimum", ">="), ("above", ">"), ("maximum", "<="))
            if meta.get(k) is not None
        ]
        if bounds:
            parts.append(" and ".join(bounds))
        if default is None and _annotation_text(spec) == "bool":
            parts.append(f"`--no-{spec.name}` turns it off")
        if meta.get("zero_one"):
            parts.append(f"`--no-{spec.name}` clears it (`--{spec.name} 1` and `--{spec.name} 0` also work)")
        text = "; ".join(part for part in parts if part)
        if meta.get("positional"):
            names = f"`{spec.name}` (positional)"
        else:
            names = ", ".join(f"`{name}`" for name in (f"--{spec.name}", *meta.get("aliases", ())))
        cell, shown = text.replace("|", "\\|"), shown.replace("|", "\\|")  # a bar inside a table cell
        lines.append(f"| {names} | {shown} | {cell} |")
    return "\n".join(lines) + "\n"


def load_class(target: str):
    """``package.module:Class`` or ``path/to/script.py:Class`` -> the class."""
    where, sep, name = target.rpartition(":")
    require(bool(sep and where and name), f"expected module:Class or script.py:Class, got {target!r}")
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location(re.sub(r"\W", "_", where), where)
        require(spec is not None, f"cannot load {where}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        try:
            spec.loader.exec_module(module)
        except FileNotFoundError:
            raise cli.UsageError(f"file not found: {where}") from None
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as error:
            raise cli.UsageError(f"no module {where!r} ({error})") from None
    config_class = getattr(module, name, None)
    require(dataclasses.is_dataclass(config_class), f"{where} has no dataclass {name!r}")
    return config_class


def refresh(text: str) -> str:
    """``text`` (markdown) with every generated block replaced by the current table of its class.

    A block is ``<!-- flags: MODULE:CLASS -->``, the table, ``<!-- end flags -->`` (each on its own line).
    """
    return BLOCK.sub(lambda m: f"{m.group(1)}{markdown(load_class(m.group(2)))}{m.group(4)}", text)


BLOCK = re.compile(r"^(<!-- flags: (\S+) -->\n)(.*?)^(<!-- end flags -->)$", re.S | re.M)


@dataclasses.dataclass(kw_only=True)
class TablesConfig(Flags):
    """Which table to print, or which docs to rewrite or check."""

    markdown: str | None = option(
        None,
        metavar="MODULE:CLASS",
        help="print one table, e.g. grpo_mse.config.gradient_evaluation:TracecovConfig or "
        "plots/make_figures.py:FiguresConfig",
    )
    update: list[str] | None = option(None, metavar="DOC", help="rewrite the generated blocks of these files")
    check: list[str] | None = option(None, metavar="DOC", help="exit 1 when a generated block is out of date")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(bool(self.markdown or self.update or self.check), "give --markdown, --update or --check")


def main(argv=None) -> int:
    args = TablesConfig.from_argv(
        argv,
        description="The markdown flag tables of config dataclasses, as docs/ shows them "
        "(run from the repository root).",
    )
    if args.markdown:
        sys.stdout.write(markdown(load_class(args.markdown)))
    stale = []
    for path in (args.update or []) + (args.check or []):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        require(bool(BLOCK.search(text)), f"{path} has no <!-- flags: MODULE:CLASS --> block")
        new = refresh(text)
        if new != text and path in (args.update or []):
            _write_text(path, new)
            print(f"updated {path}")
        elif new != text:
            stale.append(path)
    for path in stale:
        print(
            f"{path}: flag tables differ from the code; run python -m grpo_mse.flags --update {path}", file=sys.stderr
        )
    return 1 if stale else 0


def _write_text(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` (written beside it first, then renamed)."""
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)


if __name__ == "__main__":
    cli.run(main)
