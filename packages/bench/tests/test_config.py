"""bench configuration: defaults ← TOML ← command line; task selection."""

from __future__ import annotations

from pathlib import Path

import pytest
from clawrl.bench import select_tasks
from clawrl.bench.config import BenchConfig, ConfigError, load_config

FIXTURES = Path(__file__).parent / "fixtures"


def test_defaults_file_and_overrides(tmp_path: Path) -> None:
    assert load_config() == BenchConfig()
    cfg_file = tmp_path / "b.toml"
    cfg_file.write_text('samples = 3\nharnesses = ["oracle"]\nmax_tokens = 10\n')
    cfg = load_config(cfg_file, {"samples": 5, "max_tokens": None})
    assert cfg.samples == 5  # command line wins
    assert cfg.max_tokens == 10  # an option not given keeps the file's value
    assert cfg.harnesses == ["oracle"] and cfg.concurrency == BenchConfig().concurrency


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("samples = 0\n", "samples"),
        ("bogus = 1\n", "bogus"),
        ('model = "gpt"\n', "model"),
        ("samples = [\n", "b.toml"),
    ],
)
def test_bad_config_is_a_typed_error(tmp_path: Path, text: str, needle: str) -> None:
    cfg_file = tmp_path / "b.toml"
    cfg_file.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_config(cfg_file)


def test_task_selection() -> None:
    default = select_tasks(BenchConfig())
    assert len(default) == 6
    assert len({t.category for t in default}) == 6
    assert all(t.difficulty == "easy" for t in default)
    assert len(select_tasks(BenchConfig(slice="all"))) >= 40
    picked = select_tasks(
        BenchConfig(
            suites=[],
            tasks=[str(FIXTURES / "harbor_greeting"), str(FIXTURES / "clawgym_word_stats")],
        )
    )
    assert [t.layout.value for t in picked] == ["harbor", "clawgym"]
    only = select_tasks(BenchConfig(task_ids=["ini_parser", "fix_median"]))
    assert [t.id for t in only] == ["ini_parser", "fix_median"]
    with pytest.raises(ConfigError, match="nope"):
        select_tasks(BenchConfig(task_ids=["nope"]))
    with pytest.raises(ConfigError, match="no task"):
        select_tasks(BenchConfig(suites=[]))


def _external_suite(root: Path, n: int) -> Path:
    """A suite of ``n`` copies of the Harbor fixture (ids = directory names)."""
    import shutil

    for i in range(n):
        shutil.copytree(FIXTURES / "harbor_greeting", root / f"greet_{i:02d}")
    return root


def test_external_suite_defaults_to_all_its_tasks(tmp_path: Path) -> None:
    suite = str(_external_suite(tmp_path / "suite", 7))
    assert len(select_tasks(BenchConfig(suites=[suite]))) == 7
    assert len(select_tasks(load_config(None, {"suites": [suite], "slice": "all"}))) == 7
    # "default" still means one easy task per category (the fixture's one category)
    assert len(select_tasks(BenchConfig(suites=[suite], slice="default"))) == 1
    # the built-in suite keeps its default slice next to an external suite
    both = select_tasks(BenchConfig(suites=["builtin", suite]))
    assert len(both) == 6 + 7


def test_slice_samples_are_seeded(tmp_path: Path) -> None:
    suite = str(_external_suite(tmp_path / "suite", 8))
    three = [t.id for t in select_tasks(BenchConfig(suites=[suite], slice="3"))]
    assert len(three) == 3 and three == sorted(three)
    assert three == [t.id for t in select_tasks(BenchConfig(suites=[suite], slice="3"))]
    others = {
        tuple(t.id for t in select_tasks(BenchConfig(suites=[suite], slice="3", slice_seed=s)))
        for s in range(1, 6)
    }
    assert len(others | {tuple(three)}) > 1  # another seed, another sample
    quarter = select_tasks(load_config(None, {"suites": [suite], "slice": 0.25}))
    assert len(quarter) == 2  # ceil(0.25 * 8)
    assert len(select_tasks(BenchConfig(suites=[suite], slice="50"))) == 8  # at most all
    assert len(select_tasks(BenchConfig(slice="4"))) == 4  # the built-in suite samples too


@pytest.mark.parametrize("value", ["0", "1.5", "-2", "some", "0.0", True])
def test_bad_slice_is_a_config_error(value: object) -> None:
    with pytest.raises(ConfigError, match="slice"):
        load_config(None, {"slice": value})
