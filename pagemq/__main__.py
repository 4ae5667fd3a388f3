"""`python -m pagemq ...` is the same program as `pagemq ...`."""

import sys

from pagemq.cli import main

sys.exit(main())
