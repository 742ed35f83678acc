import sys

from compress.cli import main

sys.exit(main())
