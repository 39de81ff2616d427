import ctypes.util
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# Without a CUDA driver, the GPU engine's own code path runs under numba's
# CUDA simulator (numpy standing in for cupy). It must be set before numba
# is first imported. On a GPU machine the real device is tested; set
# NUMBA_ENABLE_CUDASIM=1 there to test the simulator instead.
if "NUMBA_ENABLE_CUDASIM" not in os.environ and ctypes.util.find_library("cuda") is None:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
