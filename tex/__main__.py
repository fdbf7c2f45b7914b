"""`python -m tex`: see tex/cli.py."""
import sys

from .cli import main

sys.exit(main())
