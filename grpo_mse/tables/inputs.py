"""Load prompt tables (JSONL here; a JSON list, parquet, saved dataset folder or hub id through ``tables/formats.py``),
format prompts, and check table rows that would otherwise give silently wrong numbers (run before any model work)."""

from __future__ import annotations

import json
import math
import numbers
import os
import random

from grpo_mse.errors import DataError
from grpo_mse.tables.records import V_ORACLE, oracle_count

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
# Other files a table might be saved as: a name ending in one is a (missing or unreadable) file, never a hub id, so
# that it is refused at once instead of after the hub's retries (a hub id may hold dots, but not these endings).
FILE_SUFFIXES = (".csv", ".tsv", ".txt", ".xlsx", ".xls", ".arrow", ".feather", ".pkl", ".gz", ".zip")


def read_jsonl(path: str) -> list[dict]:
    """Rows of a JSON-lines file (UTF-8; a leading byte-order mark is skipped); a malformed line raises DataError
    naming its line number."""
    rows = []
    with open(path, encoding="utf-8-sig") as handle:
        try:
            lines = handle.read().split("\n")  # not splitlines(): U+2028 may sit inside a JSON string
        except UnicodeDecodeError as error:
            from grpo_mse.tables.formats import not_utf8

            raise not_utf8(path, error) from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}: malformed JSON on line {number}: {error.msg}") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}: line {number} is not a JSON object")
        rows.append(row)
    return rows


def read_file(path: str) -> list[dict]:
    """Rows of a local ``.jsonl``, ``.json`` (a list, or ``{"data": [...]}``) or ``.parquet`` file (the last two
    read by ``tables/formats.py``)."""
    if path.endswith(".parquet"):
        from grpo_mse.tables.formats import read_parquet

        return read_parquet(path)
    if path.endswith(".json"):
        from grpo_mse.tables.formats import read_json

        rows = read_json(path)
        if rows is not None:
            return rows  # else not one JSON document: read as JSON lines below
    elif not path.endswith(".jsonl"):
        suffix = os.path.splitext(path)[1] or "(no suffix)"
        raise DataError(f"{path}: unsupported table format {suffix}; use .jsonl, .json or .parquet")
    return read_jsonl(path)


def _read_folder(path: str, split: str) -> list[dict]:
    for suffix in LOCAL_SUFFIXES:
        candidate = os.path.join(path, split + suffix)
        if os.path.isfile(candidate):
            return read_file(candidate)
    from grpo_mse.tables.formats import read_saved_dataset

    return read_saved_dataset(path, split)


def looks_local(source: str) -> bool:
    """True for anything that names a local file or folder rather than a hub id."""
    return (
        os.path.exists(source)
        or source.startswith((".", "/", "~"))
        or source.lower().endswith(LOCAL_SUFFIXES + FILE_SUFFIXES)
        or source.count("/") > 1
    )


def load_rows(source: str, split: str = "train", required=("prompt", "ground_truth")) -> list[dict]:
    """Rows from a local file/folder (never touches the network) or a hub dataset id, validated."""
    if looks_local(source):
        path = os.path.expanduser(source)
        if not os.path.exists(path):
            raise DataError(f"file not found: {source}")
        if split != "train" and os.path.isfile(path):
            from grpo_mse.tables.formats import not_a_split

            raise not_a_split(split, source, "is one file")
        rows = _read_folder(path, split) if os.path.isdir(path) else read_file(path)
    else:
        from grpo_mse.tables.formats import read_hub

        rows = read_hub(source, split)
    rows = [lift_verl_fields(row) for row in rows]
    validate_rows(rows, required, source)
    return rows


def lift_verl_fields(row: dict) -> dict:
    """A VERL row (``reward_model.ground_truth``, ``extra_info.id``) with ``ground_truth`` and ``id`` on top.

    Fields already on top win; other rows are returned unchanged (same object).
    """
    reward_model, extra = row.get("reward_model"), row.get("extra_info")
    lifted = {}
    if "ground_truth" not in row and isinstance(reward_model, dict) and "ground_truth" in reward_model:
        lifted["ground_truth"] = reward_model["ground_truth"]
    if "id" not in row and isinstance(extra, dict) and "id" in extra:
        lifted["id"] = extra["id"]
    return {**row, **lifted} if lifted else row


def validate_rows(rows: list[dict], required, source: str) -> None:
    """Raise DataError if the table is empty or a row lacks a required field."""
    if not rows:
        raise DataError(f"{source}: no rows")
    for index, row in enumerate(rows):
        for field in required:
            if field not in row:
                raise DataError(f"{source}: row {index} has no {field!r} field")
            if row[field] is None:  # the field is there: saying it is missing would hide a null left by an edit
                raise DataError(f"{source}: row {index}: {field!r} is null; give it a value or remove the row")


def has_unique_ids(rows: list[dict]) -> bool:
    """True when every row has an integer ``id`` and no two rows share one."""
    ids = [row.get("id") for row in rows]
    return all(isinstance(i, int) and not isinstance(i, bool) for i in ids) and len(set(ids)) == len(ids)


def row_keys(rows: list[dict]) -> list[int]:
    """Random-stream key of each row: its integer ``id`` when all ids are distinct, else its position."""
    return [row["id"] for row in rows] if has_unique_ids(rows) else list(range(len(rows)))


def selection(count: int, t: int, seed: int, subsample: int | None = None) -> list[int]:
    """Row positions used by a run, as the original: an optional seeded subsample, then, when ``t`` is
    below the rows left, a shuffle with the run seed and the first ``t``."""
    order = list(range(count))
    if subsample:
        order = random.Random(seed).sample(order, min(subsample, count))
    if t < len(order):
        random.Random(seed).shuffle(order)
        order = order[:t]
    return order


def prompt_text(tokenizer, prompt) -> str:
    """A message list through the tokenizer's chat template (generation prompt added); a string as is."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, dict):
        prompt = [prompt]
    if not isinstance(prompt, list) or not all(isinstance(m, dict) and "content" in m for m in prompt):
        raise DataError("prompt must be a string or a list of {'role', 'content'} messages")
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(
            "prompt is a chat message list but the model's tokenizer has no chat template; "
            "use plain-string prompts or a chat model"
        )
    return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)


def prompt_ids(tokenizer, prompt) -> list[int]:
    """Token ids of the formatted prompt (special tokens only for plain strings; templates carry theirs)."""
    text = prompt_text(tokenizer, prompt)
    return tokenizer(text, add_special_tokens=isinstance(prompt, str))["input_ids"]


SAMPLING_SETTINGS = ("model", "revision", "temperature", "top_p", "max_new_tokens", "dtype", "backend", "answer_rule")
# Recorded since the dtype/backend check: tables made before it are not flagged for lacking them.
RECENT_SETTINGS = ("dtype", "backend")
# Settings added after results were saved, with the value every earlier result had: absent means this value.
LATER_DEFAULTS = {"answer_rule": "row"}


def oracle_settings(args, n_oracle) -> dict:
    """The sampling settings an oracle table was made with (stored on every row as ``oracle_settings``)."""
    return {
        **{name: getattr(args, name, None) for name in SAMPLING_SETTINGS},
        "n_oracle": n_oracle,
        "model_fingerprint": getattr(args, "model_fingerprint", None),
    }


def settings_mismatch(rows: list[dict], run: dict, record: bool = False) -> str | None:
    """One line naming the sampling settings where the oracle table's rows differ from the run's (None if all
    agree; tables without ``oracle_settings`` are reported as such). With ``record`` the line is also kept in
    ``run["warnings"]`` (a list, empty when all agree): ``run`` is the run's saved config, so the result JSON
    records the mismatch and make_figures.py can show it, not only the run's stderr."""
    line = _settings_mismatch(rows, run)
    if record:
        run["warnings"] = [line] if line else []
    return line


def _settings_mismatch(rows: list[dict], run: dict) -> str | None:
    stored = [row.get("oracle_settings") for row in rows]
    if not any(stored):
        return "oracle table records no sampling settings: V_oracle may come from another model or sampler"

    def same(name, value, wanted):
        if name == "model":  # a local folder named relatively and absolutely is one folder
            return os.path.realpath(os.path.expanduser(str(value))) == os.path.realpath(os.path.expanduser(str(wanted)))
        return value == wanted or (
            isinstance(value, (int, float)) and isinstance(wanted, (int, float)) and float(value) == float(wanted)
        )

    def names(settings):  # one model named two ways (relative, absolute) is the same model: compare its content
        both = settings.get("model_fingerprint") and run.get("model_fingerprint")
        return [n for n in SAMPLING_SETTINGS if not (both and n == "model")] + (["model_fingerprint"] if both else [])

    differ = sorted(
        {
            f"{name}={settings.get(name, LATER_DEFAULTS.get(name))!r} (run: {run.get(name)!r})"
            for settings in stored
            if isinstance(settings, dict)
            for name in names(settings)
            if name in run
            and (name in settings or name not in RECENT_SETTINGS)
            and not same(name, settings.get(name, LATER_DEFAULTS.get(name)), run[name])
        }
    )
    return f"oracle table sampled with other settings: {', '.join(differ)}" if differ else None


# Row checks
def _empty_prompt(prompt) -> bool:
    if isinstance(prompt, str):
        return not prompt.strip()
    if isinstance(prompt, dict):
        prompt = [prompt]
    if isinstance(prompt, list):
        return not any(isinstance(m, dict) and str(m.get("content") or "").strip() for m in prompt)
    return False  # other types are refused when the prompt is formatted


def prompt_problem(prompt) -> str | None:
    """Why ``prompt`` cannot be formatted (None when it can): a string, or a list of {"role", "content"}
    messages (one such dict is taken as a list of one) whose role and content are strings."""
    if isinstance(prompt, str):
        return None
    messages = [prompt] if isinstance(prompt, dict) else prompt
    if not isinstance(messages, list):
        return (
            f"the prompt is {type(prompt).__name__} {prompt!r:.40}; it must be a string or a list of "
            "{'role', 'content'} messages"
        )
    for number, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"message {number} of the prompt is not a {{'role', 'content'}} object"
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                what = "no" if key not in message else f"a non-string ({type(message[key]).__name__})"
                return f"message {number} of the prompt has {what} {key!r} field; each message needs role and content"
    return None


def check_prompts(rows: list[dict], source: str) -> None:
    """DataError for a row whose prompt cannot be formatted or is empty (an empty string or no content)."""
    for index, row in enumerate(rows):
        problem = prompt_problem(row["prompt"])
        if problem:
            raise DataError(f"{source}: row {index}: {problem}")
        if _empty_prompt(row["prompt"]):
            raise DataError(f"{source}: row {index} has an empty prompt")


def check_oracle_values(rows: list[dict], source: str) -> None:
    """DataError unless every V_oracle is a finite number in [0, 1]; one that is not a number at all (a quoted
    "0.5", a bool, a list) is named by its type, the problem to fix."""
    for index, row in enumerate(rows):
        value = row[V_ORACLE]
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            kind = "text" if isinstance(value, str) else f"a {type(value).__name__}"
            raise DataError(
                f"{source}: row {index} has V_oracle {value!r:.40}, which is {kind}, not a number; V_oracle must be "
                "a number in [0, 1] (written without quotes)"
            )
        if not (math.isfinite(value) and 0 <= value <= 1):
            raise DataError(f"{source}: row {index} has V_oracle {value!r}; it must be a probability in [0, 1]")


CORRECT_COUNT = "correct_count"  # the table column of the rewards of 1 among the n_oracle samples behind V_oracle
COUNT_TOLERANCE = 1e-9  # V_oracle = correct_count / n_oracle up to float rounding (and a copy to 12 digits)


def check_oracle_agreement(rows: list[dict], source: str) -> None:
    """DataError for a row that carries n_oracle and correct_count (as calculate_oracle_v.py writes them) whose
    correct_count is not a whole number in [0, n_oracle], or whose V_oracle is not correct_count / n_oracle: one of
    them was edited, and which one is right cannot be told (V_oracle is the baseline, n_oracle the noise correction's
    count), so the run is refused rather than warned about. Run after check_oracle_values."""
    for index, row in enumerate(rows):
        total, count = oracle_count(row), row.get(CORRECT_COUNT)
        if is_null(total) or is_null(count):
            continue
        n, correct = whole(total), whole(count)
        if n is None or n < 1:
            continue  # check_oracle_counts names it
        if correct is None or not 0 <= correct <= n:
            raise DataError(
                f"{source}: row {index} has correct_count {count!r:.40}; it must be a whole number in [0, n_oracle "
                f"{n}] (or null)"
            )
        if not math.isclose(row[V_ORACLE], correct / n, rel_tol=0.0, abs_tol=COUNT_TOLERANCE):
            raise DataError(
                f"{source}: row {index} has V_oracle {row[V_ORACLE]!r} but correct_count {correct} of n_oracle {n} "
                f"gives {correct / n!r}; fix the edited field (or set correct_count to null to keep V_oracle)"
            )


def check_oracle_counts(rows: list[dict], source: str) -> None:
    """DataError unless every n_oracle is absent/null (an exact V; NaN is pandas' null in a parquet column) or a
    whole number >= 1 (256 or 256.0; not '256' or 256.5): the oracle-noise correction reads it."""
    for index, row in enumerate(rows):
        value = oracle_count(row)
        if not is_null(value) and (whole(value) is None or whole(value) < 1):
            raise DataError(f"{source}: row {index} has n_oracle {value!r}; it must be a whole number >= 1 (or null)")


def whole(value) -> int | None:
    """``value`` as an int when it is a whole number (256, 256.0 or a numpy scalar; not a bool or a string)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return int(number) if math.isfinite(number) and number.is_integer() else None


def is_null(value) -> bool:
    """None, or a float NaN (how pandas stores a null in a numeric parquet column)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def check_prompt_lengths(lengths: list[int], max_new_tokens: int, positions: int | None, source: str) -> None:
    """DataError when a prompt plus max_new_tokens exceeds the model's positions (``positions`` None: unknown)."""
    if not positions:
        return
    for index, length in enumerate(lengths):
        if length + max_new_tokens > positions:
            raise DataError(
                f"{source}: row {index} has {length} prompt tokens + --max_new_tokens {max_new_tokens} "
                f"> the model's {positions} positions"
            )


def model_positions(model) -> int | None:
    """The model's maximum sequence length from its config, or None when it does not say."""
    config = getattr(model, "config", None)
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
