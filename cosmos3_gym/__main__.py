"""``python -m cosmos3_gym``: the ``cosmos3-gym`` command, where the console script is not on the PATH."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
