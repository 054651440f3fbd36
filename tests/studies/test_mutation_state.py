"""mutmut's verdicts survive a fresh checkout (studies/audits/mutation_state.py): saved from meta files, restored as
meta files mutmut reads, only the decided ones, never over an existing mutants/ folder."""

import json

from studies.audits.mutation_state import function_of, restore, save

EMPTY_FIELDS = {"type_check_error_by_key", "durations_by_key", "estimated_durations_by_key"}


def write_meta(path, codes, hashes):
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"exit_code_by_key": codes, "hash_by_function_name": hashes, **{field: {} for field in EMPTY_FIELDS}}
    path.write_text(json.dumps(meta))


def test_verdicts_round_trip_through_the_committed_file(tmp_path):
    mutants, verdicts = tmp_path / "mutants", tmp_path / "results" / "verdicts.json"
    codes = {"grpo_mse.a.x_f__mutmut_1": 1, "grpo_mse.a.x_f__mutmut_2": 0, "grpo_mse.a.x_g__mutmut_1": None}
    write_meta(mutants / "grpo_mse" / "a.py.meta", codes, {"x_f": "abc", "x_g": "def"})
    write_meta(mutants / "grpo_mse" / "b.py.meta", {"grpo_mse.b.x_h__mutmut_1": None}, {"x_h": "123"})
    assert save(mutants, verdicts) == 2  # the undecided mutant and the file with none decided are left out
    saved = json.loads(verdicts.read_text())
    assert list(saved) == ["grpo_mse/a.py"] and not verdicts.with_name("verdicts.json.partial").exists()

    fresh = tmp_path / "fresh" / "mutants"
    assert restore(fresh, verdicts) == 2
    meta = json.loads((fresh / "grpo_mse" / "a.py.meta").read_text())
    assert meta["exit_code_by_key"] == {"grpo_mse.a.x_f__mutmut_1": 1, "grpo_mse.a.x_f__mutmut_2": 0}
    assert meta["hash_by_function_name"] == {"x_f": "abc", "x_g": "def"}
    # mutmut's loader asserts that no other key is there
    assert set(meta) == {"exit_code_by_key", "hash_by_function_name"} | EMPTY_FIELDS


def test_restore_leaves_an_existing_mutants_folder_alone_and_save_keeps_other_files(tmp_path):
    mutants, verdicts = tmp_path / "mutants", tmp_path / "verdicts.json"
    write_meta(mutants / "grpo_mse" / "a.py.meta", {"grpo_mse.a.x_f__mutmut_1": 1}, {"x_f": "abc"})
    save(mutants, verdicts)
    assert restore(mutants, verdicts) == 0 and restore(tmp_path / "none", tmp_path / "missing.json") == 0
    other = tmp_path / "other"
    write_meta(other / "grpo_mse" / "b.py.meta", {"grpo_mse.b.x_h__mutmut_1": 0}, {"x_h": "123"})
    assert save(other, verdicts) == 2  # a.py's verdict kept, b.py's added
    assert sorted(json.loads(verdicts.read_text())) == ["grpo_mse/a.py", "grpo_mse/b.py"]


def test_a_later_run_adds_to_the_saved_verdicts_while_the_function_is_unchanged(tmp_path):
    verdicts = tmp_path / "verdicts.json"
    first, later = tmp_path / "first", tmp_path / "later"
    old = {"grpo_mse.a.x_f__mutmut_1": 0, "grpo_mse.a.x_f__mutmut_2": 1, "grpo_mse.a.xǁCǁm__mutmut_1": 0}
    write_meta(first / "grpo_mse" / "a.py.meta", old, {"x_f": "abc", "xǁCǁm": "111"})
    save(first, verdicts)
    # the later run reruns one survivor (now killed) and the method changed since: its old verdict is dropped
    new = {"grpo_mse.a.x_f__mutmut_1": 1, "grpo_mse.a.x_f__mutmut_2": None, "grpo_mse.a.xǁCǁm__mutmut_1": None}
    write_meta(later / "grpo_mse" / "a.py.meta", new, {"x_f": "abc", "xǁCǁm": "222"})
    assert save(later, verdicts) == 2
    entry = json.loads(verdicts.read_text())["grpo_mse/a.py"]
    assert entry["exit_code_by_key"] == {"grpo_mse.a.x_f__mutmut_1": 1, "grpo_mse.a.x_f__mutmut_2": 1}
    assert entry["hash_by_function_name"] == {"x_f": "abc", "xǁCǁm": "222"}
    assert function_of("grpo_mse.a.xǁCǁm__mutmut_12") == "xǁCǁm" and function_of("p.m.x_f__mutmut_3") == "x_f"


def test_a_mutants_test_files_run_fastest_first_and_the_order_is_left_alone_without_mutmut_stats(tmp_path, monkeypatch):
    """tests/conftest.py's ``fastest_first``: files in the order of their tests' summed recorded durations (an
    unrecorded test counts 0 s), each file's tests kept together in their collected order, ties between files in
    their collected order; no stats file, or a broken one, changes nothing."""
    from types import SimpleNamespace

    from conftest import fastest_first

    def order(names):
        items = [SimpleNamespace(nodeid=name) for name in names]
        fastest_first(items)
        return [item.nodeid for item in items]

    monkeypatch.chdir(tmp_path)
    names = ["slow.py::a", "quick.py::b", "mixed.py::c", "slow.py::d", "mixed.py::e", "new.py::f", "quick.py::g"]
    assert order(names) == names  # no mutmut-stats.json here
    (tmp_path / "mutmut-stats.json").write_text("{not json")
    assert order(names) == names
    durations = {"slow.py::a": 8.3, "slow.py::d": 0.01, "quick.py::b": 0.02, "quick.py::g": 0.02}
    durations |= {"mixed.py::c": 0.5, "mixed.py::e": 0.1}
    (tmp_path / "mutmut-stats.json").write_text(json.dumps({"duration_by_test": durations}))
    assert order(names) == ["new.py::f", "quick.py::b", "quick.py::g", "mixed.py::c", "mixed.py::e"] + [
        "slow.py::a",
        "slow.py::d",
    ]
