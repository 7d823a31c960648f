"""The notebooks run from top to bottom, and each .ipynb matches its jupytext source.

`notebooks/NAME.py` (jupytext "percent" format) is the reviewed source; `notebooks/NAME.ipynb` is
generated from it with `jupytext --to ipynb notebooks/NAME.py` and committed without outputs. The
notebooks assert the claims they illustrate (for V-trace: Espeholt et al. 2018, arXiv:1802.01561),
so running them is a test of the code they use.
"""

import os
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks").glob("*.py"))
# Per cell and for the kernel's start; a whole notebook takes well under a minute on 2 CPU
# cores, so this only catches a hung kernel.
CELL_TIMEOUT_S = 300


def _cells(nb):
    """What a reviewer reads: each cell's kind and text, without ids, metadata or outputs."""
    return [(cell.cell_type, cell.source) for cell in nb.cells]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_ipynb_matches_its_source(source):
    committed = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    expected = jupytext.read(source, fmt="py:percent")
    regenerate = f"regenerate it: jupytext --to ipynb {source.relative_to(ROOT)}"
    assert _cells(committed) == _cells(expected), f"the .ipynb is out of date; {regenerate}"
    for cell in committed.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, (
                f"the .ipynb must be committed without outputs; {regenerate}")


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_notebook_runs(source):
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    # The kernel reports its interpreter, so a kernelspec that points at another Python fails here
    # instead of testing whatever that Python has installed.
    nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.prefix)"))
    # Only this interpreter's own kernelspec (ipykernel's pip install puts `python3` under
    # sys.prefix/share/jupyter/kernels; its argv[0] "python" means this interpreter), never a
    # user-wide one.
    specs = KernelSpecManager(kernel_dirs=[os.path.join(sys.prefix, "share", "jupyter", "kernels")])
    manager = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=specs)
    # Run from the repository root, so `ops` imports even without the editable install.
    client = NotebookClient(nb, km=manager, timeout=CELL_TIMEOUT_S, startup_timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(ROOT)}})
    client.execute()  # raises CellExecutionError, with the cell and traceback, if an assert fails
    printed = "".join(out.get("text", "") for out in nb.cells[-1].outputs)
    assert printed.strip() == sys.prefix
