"""``python -m lengen ...`` (also what ``torchrun --nproc_per_node N -m lengen train ...`` runs)."""
import sys

from lengen.startup import ctrl_c_at_startup

with ctrl_c_at_startup():
    from lengen.cli import main

if __name__ == "__main__":
    sys.exit(main())
