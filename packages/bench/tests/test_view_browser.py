"""bench's viewer in a real browser: Debian's headless Chromium driven by selenium (no
Selenium Manager download: the driver is /usr/bin/chromedriver, SE_OFFLINE=true), the page
opened from file:// as a user would. On the recorded mix-harness run (fixtures/view_run):
the index lists every rollout, a rollout loads lazily from its data file, a diverged call
shows its token diff, the tree has as many leaves as clawrl.prefixtree counts, the heat map
colours the trained tokens only. Screenshots go to ``$CLAWRL_TEST_ARTIFACTS`` (else the
test's tmp_path).

tools/setup.sh installs chromium and chromium-driver; without them the tests skip.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clawrl.bench.view import build_view, load_run

from .test_view import expected_leaves, trained_positions, unpack_fixture

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

pytestmark = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver (tools/setup.sh installs them)",
)


def artifacts_dir(tmp_path: Path) -> Path:
    """Where screenshots go: ``$CLAWRL_TEST_ARTIFACTS`` if set, else ``tmp_path``."""
    out = Path(os.environ.get("CLAWRL_TEST_ARTIFACTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium session (module-wide: start-up is ~1 s)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # never let Selenium Manager download anything
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.add_argument("--window-size=1400,1000")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = unpack_fixture(tmp_path_factory.mktemp("view-browser") / "run")
    return build_view(run)


def open_hash(driver: Any, page: Path, key: str) -> float:
    """Open ``page#r=key`` (or the index for ``""``) and wait until it has rendered; returns
    the seconds it took."""
    from selenium.webdriver.support.ui import WebDriverWait

    want = key.split("=", 1)[1] if key[:2] in ("r=", "g=") else "index"
    t0 = time.perf_counter()
    driver.get(page.resolve().as_uri() + (f"#{key}" if key else ""))
    WebDriverWait(driver, 30).until(
        lambda d: (d.execute_script("return window.__clawrl_rendered") or {}).get("key") == want
    )
    return time.perf_counter() - t0


def js(driver: Any, code: str) -> Any:
    return driver.execute_script(code)


def test_index_lists_every_rollout(browser: Any, page: Path, tmp_path: Path) -> None:
    open_hash(browser, page, "")
    keys = js(
        browser,
        "return [...document.querySelectorAll('#rollouts tr[data-key]')].map(r => r.dataset.key)",
    )
    assert keys == ["r0", "r1", "r2", "r3"]
    # nothing loaded yet: the rollouts' data files are inserted on demand
    assert js(browser, "return document.querySelectorAll('script[src]').length") == 0
    browser.save_screenshot(str(artifacts_dir(tmp_path) / "view-index.png"))


def _diverged_rollout(page: Path) -> tuple[str, Any]:
    run = load_run(page.parent.parent)
    for i, ro in enumerate(run.rollouts):
        if any(r["prompt_relation"]["kind"] == "diverged" for r in ro.records):
            return f"r{i}", ro
    raise AssertionError("the fixture has no diverged call")


def test_diverged_call_shows_its_token_diff(browser: Any, page: Path, tmp_path: Path) -> None:
    key, ro = _diverged_rollout(page)
    open_hash(browser, page, f"r={key}")
    assert js(
        browser,
        "return [...document.querySelectorAll('script[src]')].map(s => s.getAttribute('src'))",
    ) == [f"data/{key}.js"]
    diverged = [r for r in ro.records if r["prompt_relation"]["kind"] == "diverged"]
    boxes = js(
        browser, "return [...document.querySelectorAll('.call[data-kind=diverged]')].map(c => c.id)"
    )
    assert boxes == [f"call-{r['call_id']}" for r in diverged]
    for r in diverged:
        at = r["prompt_relation"]["diverged_at"]
        sel = f"#call-{r['call_id']}"
        assert f"diverged at token {at}" in js(
            browser, f"return document.querySelector('{sel} .diverged-at').textContent"
        )
        # side by side: the parent's tokens from `at` on (removed) against this call's (added)
        n_del = js(browser, f"return document.querySelectorAll('{sel} .tokdiff .left .del').length")
        n_ins = js(
            browser, f"return document.querySelectorAll('{sel} .tokdiff .right .ins').length"
        )
        n_ctx = js(browser, f"return document.querySelectorAll('{sel} .tokdiff .left .ctx').length")
        assert n_del > 0 and n_ins > 0 and n_ctx == min(at, 24)
    js(browser, "document.querySelector('.call[data-kind=diverged] .relation').scrollIntoView()")
    browser.save_screenshot(str(artifacts_dir(tmp_path) / "view-diverged-call.png"))


def test_tree_has_the_prefix_trees_leaves(browser: Any, page: Path, tmp_path: Path) -> None:
    run = load_run(page.parent.parent)
    for i, ro in enumerate(run.rollouts):
        open_hash(browser, page, f"r=r{i}")
        want = expected_leaves(ro.records)
        drawn = js(browser, "return document.querySelectorAll('#tree li.tnode.leaf').length")
        stated = js(browser, "return +document.querySelector('#tree ul.ptree').dataset.leaves")
        assert drawn == stated == want, (ro.harness, drawn, stated, want)
    js(browser, "document.getElementById('tree-box').scrollIntoView()")
    browser.save_screenshot(str(artifacts_dir(tmp_path) / "view-tree.png"))


def test_heat_map_colours_trained_tokens_only(browser: Any, page: Path, tmp_path: Path) -> None:
    run = load_run(page.parent.parent)
    for i, ro in enumerate(run.rollouts):
        open_hash(browser, page, f"r=r{i}")
        n_paths = js(browser, "return document.querySelectorAll('#heat-path option').length")
        by_id = {r["call_id"]: r for r in ro.records}
        for p, whole in itertools.product(range(n_paths), (False, True)):
            js(
                browser,
                f"const w = document.getElementById('heat-whole'); w.checked = {str(whole).lower()};"
                f"const s = document.getElementById('heat-path'); s.value = '{p}'; s.onchange();",
            )
            coloured = js(
                browser,
                "return [...document.querySelectorAll('#heat .t')].map(s => "
                "[+s.dataset.i, s.classList.contains('tr'), s.style.background !== ''])",
            )
            lit = {i for i, tr, bg in coloured if tr}
            assert all(tr == bg for _, tr, bg in coloured)  # coloured iff trained
            leaf = js(
                browser,
                "const s = document.getElementById('heat-path');"
                "return s.options[s.selectedIndex].dataset.call",
            )
            path_len = len(by_id[leaf]["prompt_ids"]) + len(by_id[leaf]["completion_ids"])
            # every trained token is shown, folded or not; the whole path when asked
            assert lit == trained_positions(ro.records, by_id[leaf])
            assert 0 < len(lit) < len(coloured)  # the prompt stays plain
            assert (len(coloured) == path_len) == whole
    # a bench run has no advantages: the mode is disabled and the page says so
    assert js(
        browser, "return document.querySelector('#heat-mode option[value=advantage]').disabled"
    )
    assert "recorded none" in js(browser, "return document.querySelector('.adv-note').textContent")
    # hover shows the values
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    tok = browser.find_element(By.CSS_SELECTOR, "#heat .t.tr")
    ActionChains(browser).move_to_element(tok).perform()
    assert "logprob" in browser.find_element(By.ID, "hover").text
    js(browser, "document.getElementById('heat-box').scrollIntoView()")
    browser.save_screenshot(str(artifacts_dir(tmp_path) / "view-heat.png"))


def test_larger_run_loads_lazily(browser: Any, page: Path, tmp_path: Path) -> None:
    """The fixture's rollouts copied 50 times (200 rollouts, 600 calls): the index and any
    one rollout still open in well under a few seconds (one data file at a time)."""
    import orjson

    run_dir = tmp_path / "big"
    run_dir.mkdir()
    doc = orjson.loads((page.parent.parent / "results.json").read_bytes())
    rollouts = []
    for k in range(50):
        for r in doc["rollouts"]:
            rollouts.append({**r, "rollout_id": f"{r['rollout_id']}-{k}"})
    doc["rollouts"] = rollouts
    (run_dir / "results.json").write_bytes(orjson.dumps(doc))
    big = build_view(run_dir)
    assert len(list((big.parent / "data").glob("r*.js"))) == 200
    t_index = open_hash(browser, big, "")
    t_one = open_hash(browser, big, "r=r199")
    assert js(browser, "return document.querySelectorAll('script[src]').length") == 1
    print(f"200 rollouts: index {t_index:.2f} s, one rollout {t_one:.2f} s")
    assert t_index < 10 and t_one < 10
    shutil.rmtree(run_dir)


def test_train_run_curves_steps_and_advantages(browser: Any, tmp_path: Path) -> None:
    from .test_view import unpack_train_fixture

    run_dir = unpack_train_fixture(tmp_path)
    index = build_view(run_dir)
    open_hash(browser, index, "")
    assert js(browser, "return document.querySelectorAll('#curves svg').length") == 1
    assert not js(browser, "return document.getElementById('curves-box').hidden")
    links = js(browser, "return [...document.querySelectorAll('#steps a')].map(a => a.hash)")
    assert "#step=1" in links
    browser.save_screenshot(str(artifacts_dir(tmp_path) / "view-train-curves.png"))
    open_hash(browser, index, "step=1")
    rows = js(browser, "return document.querySelectorAll('#rollouts tr[data-key]').length")
    assert rows == 8
    open_hash(browser, index, "r=r0")
    # the run recorded advantages: the mode is available and colours the trained tokens
    assert not js(
        browser, "return document.querySelector('#heat-mode option[value=advantage]').disabled"
    )
    js(
        browser,
        "const m = document.getElementById('heat-mode'); m.value = 'advantage'; m.onchange();",
    )
    bg = js(
        browser, "return [...document.querySelectorAll('#heat .t.tr')].map(s => s.style.background)"
    )
    assert bg and all(b.startswith("rgba(") for b in bg)
    assert js(browser, "return document.querySelectorAll('#heat .t:not(.tr)[style]').length") == 0
    # importance weights, recorded per token by the update: the mode colours trained tokens
    # only, and hover shows the weight
    assert not js(browser, "return document.querySelector('#heat-mode option[value=iw]').disabled")
    js(browser, "const m = document.getElementById('heat-mode'); m.value = 'iw'; m.onchange();")
    bg = js(
        browser, "return [...document.querySelectorAll('#heat .t.tr')].map(s => s.style.background)"
    )
    assert bg and all(b.startswith("rgba(") for b in bg)
    assert js(browser, "return document.querySelectorAll('#heat .t:not(.tr)[style]').length") == 0
    js(
        browser,
        "document.querySelector('#heat .t.tr').dispatchEvent(new MouseEvent('mouseover', "
        "{bubbles: true}))",
    )
    hover = js(browser, "return document.getElementById('hover').textContent")
    assert re.search(r"importance weight \d+\.\d{3}", hover), hover
