"""JavaScript that edits and reads a notebook's cells in the page, for tests/test_browser.py.

Split from tests/browser_helpers.py (the server, the browser and the run): these act on single
cells the way a learner does (a cell added, typed into and run) and read what each cell shows.
Each runs in the page against ``window.__labkit.panel`` (set by browser_helpers.JS_OPEN) and returns plain JSON.
"""

# Answer an exercise the way a learner does: a code cell typed into the open notebook and run.

# Add a code cell with ``source`` at the end of the open notebook; returns its index.
JS_ADD_CELL = """(source) => {
  const panel = window.__labkit.panel;
  const index = panel.model.cells.length;
  panel.model.sharedModel.insertCell(index, {cell_type: 'code', source});
  return index;
}"""

# Set the source of cell ``index`` (as if typed), select it and run it alone (the toolbar's "run" button).
JS_EDIT_AND_RUN = """async ([index, source]) => {
  const app = window.jupyterapp;
  const panel = window.__labkit.panel;
  app.shell.activateById(panel.id);
  panel.model.cells.get(index).sharedModel.setSource(source);
  panel.content.activeCellIndex = index;
  panel.content.deselectAll();
  void app.commands.execute('notebook:run-cell');  // not awaited: the test polls JS_CELL_OUTPUT with a timeout
  return true;
}"""

# What cell ``index`` shows: its execution count, whether it runs, and the text its output area renders.
JS_CELL_OUTPUT = """(index) => {
  const panel = window.__labkit.panel;
  const cell = panel.model.cells.get(index);
  const outs = panel.content.widgets[index].node.querySelectorAll('.jp-OutputArea-output');  // not the prompt
  const text = Array.from(outs).map((o) => o.innerText.trim()).join('\\n');
  return {count: cell.executionCount, state: cell.executionState, text};
}"""

# Every code cell of the open notebook: its index, its source, and the text its outputs show on the page.
JS_CELL_TEXTS = """() => {
  const panel = window.__labkit.panel;
  const found = [];
  panel.content.widgets.forEach((cell, index) => {
    if (cell.model.type !== 'code') return;
    const outs = cell.node.querySelectorAll('.jp-OutputArea-output');  // not the prompt
    const output = Array.from(outs).map((o) => o.innerText).join('\\n');
    found.push({index, source: cell.model.sharedModel.getSource(), output});
  });
  return found;
}"""
