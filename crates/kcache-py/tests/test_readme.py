"""The README's Python example runs as it is (in a process of its own)."""

import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_python_example_runs(tmp_path):
    text = README.read_text()
    m = re.search(r"<!-- python-example: begin -->\n```python\n(.*?)```\n<!-- python-example: end -->",
                  text, re.S)
    assert m, "README.md has no python-example block"
    example = tmp_path / "example.py"
    example.write_text(m.group(1))
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "miss:" in done.stdout
