"""Setup, beside setup.cfg: an editable install byte-compiles the package's sources.

A regular `pip install` writes every module's .pyc; an editable install (`pip install
-e`, what CI and the checks use) writes none, and where PYTHONDONTWRITEBYTECODE is set
(containers, CI) Python then compiles tex's ~90 modules from source in every new
process: 200-600 ms more on the first call of tex.einsum. Compiling them once here
restores what a regular install gives. A stale .pyc (the source edited since) is
checked by its source's mtime and size and ignored, as always."""
import compileall
import os

from setuptools import setup
from setuptools.command.editable_wheel import editable_wheel

SOURCE_DIRS = ("tex", "schedule", "backends")     # setup.cfg's package_dir


class EditableWheelByteCompiled(editable_wheel):
    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        for folder in SOURCE_DIRS:
            compileall.compile_dir(os.path.join(here, folder), quiet=1)


setup(cmdclass={"editable_wheel": EditableWheelByteCompiled})
