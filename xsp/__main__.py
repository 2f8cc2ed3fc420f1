import sys

from xsp.cli import main

sys.exit(main())
