"""examples/tutorial.ipynb runs from top to bottom without an error, in a Jupyter kernel
of this interpreter (the `python3` kernel that ipykernel installs in the environment)."""
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parent.parent / "examples" / "tutorial.ipynb"


def test_tutorial_notebook_executes(monkeypatch):
    # this environment's kernelspec first, before any in the user's own Jupyter folders
    monkeypatch.setenv("JUPYTER_PATH", str(Path(sys.prefix) / "share" / "jupyter"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # one more cell: the kernel must be this interpreter (its tex, its numpy)
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.prefix)"))
    client = NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()                    # raises CellExecutionError on any error
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                      for o in c.outputs if o.output_type == "stream")
    assert "tutorial: all results match numpy" in printed
    assert nb.cells[-1].outputs[0].text.strip() == sys.prefix
    assert not any(o.output_type == "error" for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs)
