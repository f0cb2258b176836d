"""Entry point of ``python -m connector.mqtt``."""

import sys

from .cli import main

sys.exit(main())
