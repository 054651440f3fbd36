"""The flag tables that docs/ shows, generated from the config dataclasses (``grpo_mse.flags``):
``python scripts/flag_tables.py --markdown module:Class`` prints one table, ``--update DOC`` rewrites a doc's
generated blocks and ``--check DOC`` exits 1 when one is out of date (tests/studies/test_flag_tables.py checks
that docs and code agree).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import re
import sys

from grpo_mse.errors import UsageError, require
from grpo_mse.flags import Flags, _annotation, _annotation_text, _default, option

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
        if not os.path.isabs(where) and not os.path.exists(where):  # a docs block's path, from another directory
            where = os.path.join(REPOSITORY, where)
        spec = importlib.util.spec_from_file_location(re.sub(r"\W", "_", where), where)
        require(spec is not None, f"cannot load {where}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        try:
            spec.loader.exec_module(module)
        except FileNotFoundError:
            raise UsageError(f"file not found: {where}") from None
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as error:
            raise UsageError(f"no module {where!r} ({error})") from None
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
        "(script paths in the docs' blocks are the repository's).",
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
            f"{path}: flag tables differ from the code; run python scripts/flag_tables.py --update {path}",
            file=sys.stderr,
        )
    return 1 if stale else 0


def _write_text(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` (written beside it first, then renamed)."""
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)
