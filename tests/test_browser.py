"""The lab in a real browser: each student copy opened in JupyterLab in headless Chromium, run, its panel touched.

One JupyterLab server on 127.0.0.1 (free port, token) and one Chromium page serve every
notebook in turn. The notebooks are the student copies ``make lab`` gives a learner
(:func:`labkit.course.copies.make_student_copies`: outputs and widget state cleared, every
guess None), so Run All is the learner's no-guess path. For each notebook the test runs all
cells, waits for the kernel, and checks: no error in any cell or from the kernel; no reveal
gives its answer or a verdict, the journal says "no guess" for each registered prediction,
and no answer shows above its reveal (tests/reveal_checks.py, read from the page); the widget
panel rendered live (ipywidgets' JupyterLab extension active, a slider or dropdown present, a
figure drawn in the panel's output) and a changed control redraws it; then a cell the learner
adds commits every right answer, and the journal keeps each as "after reveal", not right.
A second test answers an exercise as a learner does, in a cell typed into notebook 01 and
run, and reads the feedback the page shows: unanswered, wrong (one hint step), then right.

This is also what tests/test_run_all.py checks without a browser; where this test can run,
that one skips the notebooks run here, so CI runs each notebook twice (nbval and here), not three times.

Needs Debian's Chromium (``apt-get install chromium``) and the ``playwright`` package of the
test extra; without either the test is skipped. No browser is downloaded.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from browser_cells import JS_ADD_CELL, JS_CELL_OUTPUT, JS_CELL_TEXTS, JS_EDIT_AND_RUN
from browser_helpers import (
    BROWSER_NOTEBOOKS,
    CHROMIUM,
    CHROMIUM_ARGS,
    JS_DONE,
    JS_ERRORS,
    JS_FIND_PANELS,
    JS_IDLE_COUNT,
    JS_OPEN,
    JS_PANEL_STATE,
    JS_PROGRESS,
    JS_RUN_ALL,
    LabServer,
    browser_missing,
    copy_notebooks,
    lab_server,
    panel_selector,
)
from reveal_checks import check_nothing_revealed, check_recorded, commit_source

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = list(BROWSER_NOTEBOOKS)  # 00 is the course guide: no panel, no prediction
RUN_TIMEOUT_S = int(os.environ.get("LABKIT_BROWSER_RUN_S", "240"))  # per notebook, all cells; more on a busy host
REDRAW_TIMEOUT_S = 60  # one control changed, kernel answered
CHANGE_TRIES = 6
SETTLE_S = 5
ANSWER_TIMEOUT_S = 120  # a fresh kernel starts, imports labkit and answers one cell
EXERCISE = "01.zero_stage"  # smallest ZeRO stage for 7.5B parameters under 20 GB per GPU on 64: stage 2

if browser_missing():
    pytest.skip(browser_missing(), allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason=browser_missing() or "playwright.sync_api")

TIMES: dict[str, tuple[float, float]] = {}  # notebook: seconds to run all cells, seconds in all
ANSWER_TIMES: list[float] = []  # seconds of the exercise test, kernel start included


JOURNAL = "labkit-journal.jsonl"  # beside labs/ in the lab's home: every kernel of the server appends to it
SINK = "answers.jsonl"  # what each reveal knew ($LABKIT_ANSWER_SINK), as in the instructor's build


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    home = tmp_path_factory.mktemp("lab")
    copy_notebooks(ROOT / "labs", home / "labs")
    env = {"LABKIT_JOURNAL": str(home / JOURNAL), "LABKIT_ANSWER_SINK": str(home / SINK)}
    with lab_server(home / "labs", home, env=env) as server:
        yield server


def _log_tail(lab: LabServer, lines: int = 30) -> str:
    """The end of the JupyterLab server's log (a kernel that died or restarted says so there)."""
    log = lab.root.parent / "lab.log"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.is_file() else "(no log)"


def _answers(lab: LabServer, notebook: str) -> dict[str, object]:
    """The answers the reveals of ``notebook`` ("01") knew, by key (the sink is shared by all notebooks)."""
    sink = lab.root.parent / SINK
    lines = sink.read_text().splitlines() if sink.is_file() else []
    return {a["key"]: a["answer"] for a in map(json.loads, lines) if a["key"].startswith(notebook + ".")}


@pytest.fixture(scope="module")
def page(lab: LabServer) -> Iterator[object]:
    """One headless Chromium page with JupyterLab loaded; notebooks open in it one after another."""
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=list(CHROMIUM_ARGS))
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        pg = context.new_page()
        pg.goto(f"{lab.base}/lab?reset&token={lab.token}", timeout=120_000)
        pg.wait_for_function("() => window.jupyterapp !== undefined", timeout=120_000)
        pg.evaluate("async () => { await window.jupyterapp.restored; return true; }")
        yield pg
        if TIMES:
            print("\nbrowser seconds per notebook (run all / in all): "
                  + ", ".join(f"{k[:2]} {a:.0f}/{b:.0f}" for k, (a, b) in TIMES.items()))
        if ANSWER_TIMES:
            print("browser seconds to answer an exercise (none, wrong, right; kernel start included): "
                  f"{ANSWER_TIMES[0]:.0f}")
        browser.close()


def _close(page: object) -> None:
    """Shut the notebook's kernel down and close its tab, so the next notebook has the CPUs."""
    page.evaluate("""async () => {
      const panel = window.__labkit && window.__labkit.panel;
      if (!panel || panel.isDisposed) return;
      await panel.sessionContext.shutdown();
      panel.context.model.dirty = false;
      panel.dispose();
    }""")


def _set_and_wait(page: object, index: int, act: Callable[[], None]) -> dict:
    """Change a control, wait until the kernel has handled it (busy, then idle), return the panel's state.

    The views draw what the kernel sent a moment after it goes idle: allow them ``SETTLE_S``.
    """
    state = page.evaluate(JS_PANEL_STATE, index)
    idle = page.evaluate(JS_IDLE_COUNT)
    act()
    page.wait_for_function(f"() => ({JS_IDLE_COUNT})() > {idle}", timeout=REDRAW_TIMEOUT_S * 1000, polling=200)
    try:
        page.wait_for_function(f"(b) => JSON.stringify(({JS_PANEL_STATE})({index})) !== JSON.stringify(b)",
                               arg=state, timeout=SETTLE_S * 1000, polling=100)
    except sync_api.TimeoutError:
        pass  # the kernel answered and nothing changed: the caller decides whether that is a failure
    return page.evaluate(JS_PANEL_STATE, index)


def _change_a_control(page: object, index: int) -> dict:
    """Move the panel's first slider, or pick a neighbouring value in its dropdowns, until the figure is redrawn.

    Some values are bad input for the rest of the panel (it then shows a message and no
    figure); such a value is put back before the next one is tried, up to ``CHANGE_TRIES``.
    Returns the panel's state before and after the change that redrew it (or the last one).
    """
    sel = panel_selector(index)
    before = after = page.evaluate(JS_PANEL_STATE, index)
    slider = page.locator(f"{sel} .widget-slider .noUi-handle")
    if slider.count():
        def step() -> None:
            slider.first.focus()
            page.keyboard.press("ArrowRight")

        return {"before": before, "after": _set_and_wait(page, index, step)}
    dropdowns = page.locator(f"{sel} .widget-dropdown select")
    tries: list[tuple[int, int, int]] = []
    for d in range(dropdowns.count()):
        n, current = dropdowns.nth(d).evaluate("s => [s.options.length, s.selectedIndex]")
        tries += [(d, current, k) for k in (current - 1, current + 1) if 0 <= k < n]
    for d, current, option in tries[:CHANGE_TRIES]:
        after = _set_and_wait(page, index, lambda: dropdowns.nth(d).select_option(index=option))  # noqa: B023
        if after["figures"] and after["figures"] != before["figures"]:
            break
        _set_and_wait(page, index, lambda: dropdowns.nth(d).select_option(index=current))  # noqa: B023
    return {"before": before, "after": after}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_in_the_browser_and_its_panel_reacts(lab: LabServer, page: object, name: str) -> None:
    """Run All on the student copy: no error, nothing revealed, "no guess" journaled; the panel redraws;
    right answers committed afterwards are "after reveal"."""
    start = time.monotonic()
    ran = float("nan")
    try:
        info = page.evaluate(JS_OPEN, name)
        assert info["kernel"] == "python3"
        assert info["widgets"], "ipywidgets' JupyterLab extension (jupyterlab_widgets) is not active"
        page.evaluate(JS_RUN_ALL)
        try:
            page.wait_for_function(JS_DONE, timeout=RUN_TIMEOUT_S * 1000, polling=500)
        except sync_api.TimeoutError:
            pytest.fail(f"{name}: not run in {RUN_TIMEOUT_S} s (a loaded machine? set LABKIT_BROWSER_RUN_S): "
                        f"{page.evaluate(JS_PROGRESS)}")
        ran = time.monotonic() - start
        assert page.evaluate(JS_ERRORS) == [], f"{name}: error output"
        progress = page.evaluate(JS_PROGRESS)
        if progress["ran"] < progress["total"]:
            pytest.fail(f"{name}: Run All stopped without an error after {progress['ran']} of {progress['total']} "
                        f"code cells: {progress}; the lab's log ends:\n{_log_tail(lab)}")
        notebook, journal_file = name[:2], lab.root.parent / JOURNAL
        answers = _answers(lab, notebook)
        check_nothing_revealed(notebook, page.evaluate(JS_CELL_TEXTS), answers)
        check_recorded(notebook, journal_file, answers, committed=False)

        try:  # the widget views draw a moment after the kernel is done
            page.wait_for_function(f"() => ({JS_FIND_PANELS})().some((p) => p.figures > 0)",
                                   timeout=REDRAW_TIMEOUT_S * 1000, polling=250)
        except sync_api.TimeoutError:
            pass  # the asserts below say what is missing
        panels = page.evaluate(JS_FIND_PANELS)
        assert panels, f"{name}: no widget panel (slider or dropdown) rendered"
        drawn = [i for i, p in enumerate(panels) if p["figures"] > 0]
        assert drawn, f"{name}: no panel drew a figure: {panels}"
        change = _change_a_control(page, drawn[0])
        assert page.evaluate(JS_ERRORS) == [], f"{name}: error after a control changed"
        changed = change["after"]["figures"] and change["after"]["figures"] != change["before"]["figures"]
        assert changed, (f"{name}: the panel's figure was not redrawn after its controls changed; it shows "
                         f"{change['after']['text'][:300]!r} (an exception in a callback goes to the kernel's log)")

        if answers:  # the learner, having seen the measurements below the reveals, commits the right answers
            cell = page.evaluate(JS_ADD_CELL, "")
            shown = _answer(page, cell, commit_source(answers))
            assert shown.startswith(f"committed {len(answers)} answers"), shown
            check_recorded(notebook, journal_file, answers, committed=True)
    finally:
        TIMES[name] = (ran, time.monotonic() - start)
        _close(page)


def _answer(page: object, index: int, source: str) -> str:
    """Put ``source`` in cell ``index``, run that cell alone, and return the text its output shows once run."""
    before = page.evaluate(JS_CELL_OUTPUT, index)["count"]
    page.evaluate(JS_EDIT_AND_RUN, [index, source])
    page.wait_for_function(f"""(before) => {{
      const o = ({JS_CELL_OUTPUT})({index});
      return o.state !== 'running' && o.count !== null && o.count !== before && o.text !== '';
    }}""", arg=before, timeout=ANSWER_TIMEOUT_S * 1000, polling=250)
    return page.evaluate(JS_CELL_OUTPUT, index)["text"]


# A fresh kernel on the student copy: the notebook's first cell registers 01's exercises; the added cell does too.
PRELUDE = "from labkit.storage import exercises  # noqa: F401\nfrom labkit.teach import checks\n"


@pytest.mark.parametrize("name", [n for n in NOTEBOOKS if n.startswith("01")][:1])
def test_an_exercise_answered_in_the_page_shows_its_feedback(page: object, name: str) -> None:
    """A learner's own cell at the end of the student copy: unanswered, then wrong (one hint step), then right.

    The cell is added rather than an existing one edited, so the test holds whatever the
    notebook's exercise cells look like; only the exercise key is assumed.
    """
    start = time.monotonic()
    try:
        page.evaluate(JS_OPEN, name)
        cell = page.evaluate(JS_ADD_CELL, "from labkit.teach import checks")
        shown = _answer(page, cell, PRELUDE + f'checks.check("{EXERCISE}", None)')
        assert shown.startswith("Not answered yet."), shown
        assert "Hint" not in shown, f"a hint before any try: {shown!r}"

        shown = _answer(page, cell, PRELUDE + f'checks.check("{EXERCISE}", 1)')
        assert shown.startswith("Not quite: 1 is too low."), shown
        assert "Hint 1:" in shown and "Hint 2:" not in shown, f"one hint step after one wrong try: {shown!r}"
        assert "Worked answer" not in shown, f"the answer given away after one try: {shown!r}"

        shown = _answer(page, cell, PRELUDE + f'checks.check("{EXERCISE}", 2)')
        assert shown.startswith("Right: 2."), shown
        assert page.evaluate(JS_ERRORS) == [], f"{name}: error output"
    finally:
        ANSWER_TIMES.append(time.monotonic() - start)
        _close(page)
