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
way in ``__post_init__``, its values' types first (``check_types``: what the flag could not give, such as
``T="4"``, ``T=True`` or ``K_list=[]``, is a FieldTypeError).
Subcommands (``prog NAME FLAGS...``): ``parse_command({"NAME": Config, ...}, argv)`` returns (NAME, its
validated config); each config's docstring's first line is the subcommand's help.
``help`` is the flag's help; the other keywords of ``option`` are argparse's
(``type``, ``nargs``, ``choices``, ``metavar``, ``aliases`` as extra option strings) plus the bounds
``minimum``, ``maximum`` and ``above`` (strictly greater), ``positional=True`` (an argument without ``--``)
and, for a bool that defaults to True, ``zero_one=True`` (the older ``--x 1`` / ``--x 0`` form accepted
beside ``--x`` / ``--no-x``). The argparse ``type`` and ``nargs`` follow from
the annotation when not given (``int``, ``float``, ``str``, ``X | None``, ``list[X]``, ``tuple[X, ...]``).

The flag tables that docs/ shows are generated from these configs by studies/flag_tables.py
(``python scripts/flag_tables.py --markdown module:Class``). This module imports only ``grpo_mse.cli`` and
``grpo_mse.errors``.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import field
from typing import ClassVar

from grpo_mse import cli
from grpo_mse.errors import FieldTypeError, require

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


KINDS = {int: "an integer", float: "a number", str: "a string", bool: "True or False"}


def _allows_none(spec: dataclasses.Field) -> bool:
    text = spec.type if isinstance(spec.type, str) else str(spec.type)
    return bool(re.search(r"\|\s*None$|^Optional\[", text.strip()))


def _is(kind: type, value) -> bool:
    """``value`` is of ``kind`` as a flag of that type would give it: a bool only for a bool (True is an int to
    Python, not a count), an int or float for a float."""
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    return isinstance(value, (int, float)) if kind is float else isinstance(value, kind)


def type_problem(spec: dataclasses.Field, value) -> str | None:
    """Why ``value`` cannot be field ``spec``'s (one line), or None: what its annotation and flag could not give,
    such as ``T="4"``, ``M=4.0``, ``T=True``, ``estimators="grpo"`` (a string is not a list of names), an empty
    list for a flag that takes one value or more, None for a field that is not optional. Fields of other types
    (a custom flag ``type``, nested lists) are not checked."""
    flag, text = f"--{spec.name}", _annotation_text(spec)
    kind, nargs, _ = (bool, None, False) if text == "bool" else _annotation(spec)
    if kind is None:
        return None
    if value is None:
        return None if _allows_none(spec) else f"{flag} must be given: None is not {KINDS[kind]}"
    if nargs is None:
        return (
            None if _is(kind, value) else f"{flag} must be {KINDS[kind]} (got {value!r} of type {type(value).__name__})"
        )
    if not isinstance(value, (list, tuple)):
        return f"{flag} must be a list of values, each {KINDS[kind]} (got {value!r})"
    several = spec.metadata.get("nargs") or ("*" if spec.metadata.get("positional") else "+")
    if several == "+" and not value:
        return f"{flag} needs one value or more (got an empty list)"
    wrong = next((item for item in value if not _is(kind, item)), None)
    if wrong is not None or any(item is None for item in value):
        return f"{flag} must hold values each {KINDS[kind]} (got {wrong!r} of type {type(wrong).__name__})"
    return None


def check_types(config) -> None:
    """FieldTypeError (one line) for the first field whose value's type is wrong (``type_problem``)."""
    for spec in dataclasses.fields(config):
        problem = type_problem(spec, getattr(config, spec.name))
        if problem:
            raise FieldTypeError(problem)


def check_fields(config) -> None:
    """FieldTypeError for a value of the wrong type (``check_types``), then UsageError when a field's value is
    outside its ``choices`` or bounds (each list item is checked)."""
    check_types(config)
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
    """Base of a dataclass config whose fields are flags: ``from_argv``, ``record``, checks.

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
    def from_argv(cls, argv=None, description: str | None = None):
        """Parse ``argv`` (sys.argv when None) into a validated config; bad values raise UsageError."""
        return parse(cls, argv, description)
