"""Predicates: DEFINE conditions compiled for the fast engines.

Row-local conditions become vectorised boolean masks and per-row class ids
(masks.py); state-dependent ones are for a later stage.
"""

from .masks import (MAX_VARIABLES, MaskProgram, MaskResult, MaskSet, MaskUnsupported,
                    compile_mask, compile_masks, evaluate_masks, pack_classes, supports,
                    supports_query)

__all__ = ["MAX_VARIABLES", "MaskProgram", "MaskResult", "MaskSet", "MaskUnsupported",
           "compile_mask", "compile_masks", "evaluate_masks", "pack_classes", "supports",
           "supports_query"]
