"""`python -m sebulba.pbt`: population-based training across runs (`sebulba.pbt.runs`)."""

import sys

from sebulba.pbt.runs import main

if __name__ == "__main__":
    sys.exit(main())
