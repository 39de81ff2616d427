"""Eight rows at a time in vector registers, for the CPU engine's walk.

What: helpers that read a block of ``LANES`` consecutive rows at once and
answer with bit masks (bit ``j``: row ``q0 + j``):

- ``lane_steps(row_keys, lineage, q0, t, thread_shift, max_key)``: each
  row's lineage word for thread ``t`` (as kernels/unanchored.py
  ``_walk_row`` reads it, the row key clamped to ``max_key``); returns
  ``(rows that begin the match, rows whose parent is not t, the rows'
  variables one byte each)``;
- ``lane_members(variables, member_bits)``: the rows whose variable ``v``
  has bit ``v`` set in ``member_bits``;
- ``lane_min(keys, i0, counted, orient, none)``: over the rows of
  ``counted``, their keys ``keys[i0 + j]`` turned toward a MIN
  (kernels/unanchored.py ``toward_min``), the least one (``none`` when no
  row counts), the mask of the counted rows equal to it, and whether one
  of them is NaN;
- ``lowest_lane(mask)``, ``highest_lane(mask)``: the index of the lowest or
  highest set bit (``mask`` not 0).

Compiled (numba, CPU only), each is a handful of vector instructions: one
load of the keys, eight loads of the lineage, compares that give their
mask directly. In plain Python they loop over the lanes, with the same
results.
Why: a tick-data match is 3 to 10 rows long, and a walk row by row
mispredicts where each match begins: on v_shape's 1.05 million matches the
bare walk took 14.9 ms of one core row by row, 6.6-6.9 ms in blocks.
Reading the 8 rows before a match's end at once, and finding its first
row as the highest lane that begins it, has no branch on the data.
Written as LLVM vector code, because the same loop over 8 lanes in numba
stays scalar (about 1.7 ns a lane, against the walk's 3 a row plus the
mispredicted exit).
"""

from __future__ import annotations


#: Rows per block.
LANES = 8


def lane_steps(row_keys, lineage, q0, t, thread_shift, max_key) -> tuple:
    """``(begins, other parent, variables)`` of rows ``q0 .. q0+7``."""
    begins = other = variables = 0
    for j in range(LANES):
        key = min(int(row_keys[q0 + j]), int(max_key))
        step = int(lineage[(key << int(thread_shift)) | int(t)])
        begins |= ((step >> 33) & 1) << j
        other |= int((step & 0xFFFF) != t) << j
        variables |= ((step >> 16) & 0xFF) << (8 * j)
    return begins, other, _signed(variables)


def lane_members(variables, member_bits) -> int:
    """The lanes whose variable (a byte of ``variables``) is in ``member_bits``."""
    mask = 0
    for j in range(LANES):
        v = (int(variables) >> (8 * j)) & 0xFF
        mask |= ((int(member_bits) >> v) & 1 if v < 64 else 0) << j
    return mask


def lane_min(keys, i0, counted, orient, none) -> tuple:
    """``(least key toward a MIN, lanes equal to it, a counted key is NaN)``."""
    keys_f = keys.dtype.kind == "f"
    turned = [(float(keys[i0 + j]) * orient if keys_f else int(keys[i0 + j]) ^ int(orient))
              for j in range(LANES)]
    least = none
    nan = False
    for j in range(LANES):
        if counted >> j & 1:
            if turned[j] != turned[j]:
                nan = True
            elif turned[j] < least:
                least = turned[j]
    ties = 0
    for j in range(LANES):
        ties |= int(bool(counted >> j & 1) and turned[j] == least) << j
    return least, ties, nan


def lowest_lane(mask) -> int:
    """The index of ``mask``'s lowest set bit (``mask`` not 0)."""
    mask = int(mask)
    return (mask & -mask).bit_length() - 1


def highest_lane(mask) -> int:
    """The index of ``mask``'s highest set bit (``mask`` not 0)."""
    return int(mask).bit_length() - 1


def _signed(word: int) -> int:
    """A 64-bit pattern as the int64 numba holds it."""
    return word - (1 << 64) if word >> 63 else word


try:
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic, overload

    _I64 = ir.IntType(64)

    def _splat(builder, value, lanes=LANES):
        """A vector of ``lanes`` copies of the scalar ``value``."""
        vector = ir.VectorType(value.type, lanes)
        one = builder.insert_element(ir.Constant(vector, ir.Undefined), value,
                                     ir.Constant(ir.IntType(32), 0))
        return builder.shuffle_vector(one, ir.Constant(vector, ir.Undefined),
                                      ir.Constant(ir.VectorType(ir.IntType(32), lanes),
                                                  [0] * lanes))

    def _mask_word(builder, flags):
        """<8 x i1> as an i64 whose bit j is lane j."""
        return builder.zext(builder.bitcast(flags, ir.IntType(LANES)), _I64)

    def _lane_pointer(context, builder, array_type, array, index, element):
        """``&array[index]`` as a pointer to ``LANES`` elements of type ``element``."""
        view = context.make_array(array_type)(context, builder, array)
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, [index],
                                           wraparound=False, boundscheck=False)
        return builder.bitcast(pointer, ir.VectorType(element, LANES).as_pointer())

    @intrinsic
    def _lane_steps(typingctx, row_keys, lineage, q0, t, thread_shift, max_key):
        if not (isinstance(row_keys, types.Array) and isinstance(row_keys.dtype, types.Integer)
                and row_keys.dtype.bitwidth in (16, 32)
                and isinstance(lineage, types.Array) and lineage.dtype == types.int64):
            return None
        sig = types.UniTuple(types.int64, 3)(row_keys, lineage, types.int64, types.int64,
                                             types.int64, types.int64)

        def codegen(context, builder, signature, args):
            keys_t, lineage_t = signature.args[0], signature.args[1]
            keys_a, lineage_a, q0, t, shift, max_key = args
            width = keys_t.dtype.bitwidth
            vector = ir.VectorType(_I64, LANES)
            raw = builder.load(_lane_pointer(context, builder, keys_t, keys_a, q0,
                                             ir.IntType(width)), align=1)
            keys = (builder.zext(raw, vector) if not keys_t.dtype.signed
                    else builder.sext(raw, vector))
            top = _splat(builder, max_key)
            keys = builder.select(builder.icmp_unsigned(">", keys, top), top, keys)
            index = builder.or_(builder.shl(keys, _splat(builder, shift)), _splat(builder, t))
            view = context.make_array(lineage_t)(context, builder, lineage_a)
            steps = ir.Constant(vector, ir.Undefined)
            for j in range(LANES):
                lane = ir.Constant(ir.IntType(32), j)
                pointer = builder.gep(view.data, [builder.extract_element(index, lane)])
                steps = builder.insert_element(steps, builder.load(pointer, align=8), lane)
            zero = ir.Constant(vector, [0] * LANES)
            begins = builder.icmp_unsigned(
                "!=", builder.and_(steps, ir.Constant(vector, [1 << 33] * LANES)), zero)
            parents = builder.and_(steps, ir.Constant(vector, [0xFFFF] * LANES))
            other = builder.icmp_unsigned("!=", parents, _splat(builder, t))
            variables = builder.trunc(builder.lshr(steps, ir.Constant(vector, [16] * LANES)),
                                      ir.VectorType(ir.IntType(8), LANES))
            packed = builder.bitcast(variables, _I64)
            return context.make_tuple(builder, signature.return_type,
                                      [_mask_word(builder, begins), _mask_word(builder, other),
                                       packed])
        return sig, codegen

    @intrinsic
    def _lane_members(typingctx, variables, member_bits):
        sig = types.int64(types.int64, types.int64)

        def codegen(context, builder, signature, args):
            variables, bits = args
            vector = ir.VectorType(_I64, LANES)
            ids = builder.zext(builder.bitcast(variables, ir.VectorType(ir.IntType(8), LANES)),
                               vector)
            # a variable id of 64 or more is in no set (the shift would be poison)
            shifted = builder.lshr(_splat(builder, bits),
                                   builder.and_(ids, ir.Constant(vector, [63] * LANES)))
            inside = builder.and_(
                builder.icmp_unsigned("!=", builder.and_(shifted, ir.Constant(
                    vector, [1] * LANES)), ir.Constant(vector, [0] * LANES)),
                builder.icmp_unsigned("<", ids, ir.Constant(vector, [64] * LANES)))
            return _mask_word(builder, inside)
        return sig, codegen

    def _min_tree(builder, values):
        """The least of a vector of doubles by halves, each step ``a < b ? a :
        b`` (x86's ``minpd``; LLVM's own reduction keeps IEEE minNum's NaN
        rule and comes out as scalar compares). A NaN may come out: the
        caller's result is then dropped (``lane_min``'s NaN flag)."""
        width = LANES
        while width > 1:
            width //= 2
            low = builder.shuffle_vector(values, values, ir.Constant(
                ir.VectorType(ir.IntType(32), width), list(range(width))))
            high = builder.shuffle_vector(values, values, ir.Constant(
                ir.VectorType(ir.IntType(32), width), list(range(width, 2 * width))))
            values = builder.select(builder.fcmp_ordered("<", low, high), low, high)
        return builder.extract_element(values, ir.Constant(ir.IntType(32), 0))

    @intrinsic
    def _lane_min(typingctx, keys, i0, counted, orient, none):
        if not (isinstance(keys, types.Array) and keys.dtype in (types.float64, types.int64)):
            return None
        value = keys.dtype
        sig = types.Tuple((value, types.int64, types.boolean))(keys, types.int64, types.int64,
                                                               value, value)

        def codegen(context, builder, signature, args):
            keys_t = signature.args[0]
            keys_a, i0, counted, orient, none = args
            floats = isinstance(keys_t.dtype, types.Float)
            element = ir.DoubleType() if floats else _I64
            lane_mask = ir.VectorType(ir.IntType(1), LANES)
            raw = builder.load(_lane_pointer(context, builder, keys_t, keys_a, i0, element),
                               align=8)
            turned = (builder.fmul(raw, _splat(builder, orient)) if floats
                      else builder.xor(raw, _splat(builder, orient)))
            use = builder.bitcast(builder.trunc(counted, ir.IntType(LANES)), lane_mask)
            candidates = builder.select(use, turned, _splat(builder, none))
            if floats:
                least = _min_tree(builder, candidates)
                equal = builder.fcmp_ordered("==", candidates, _splat(builder, least))
                nan = builder.and_(builder.fcmp_unordered("uno", turned, turned), use)
            else:
                least = builder.call(cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(element, [candidates.type]),
                    "llvm.vector.reduce.smin.v8i64"), [candidates])
                equal = builder.icmp_signed("==", candidates, _splat(builder, least))
                nan = ir.Constant(lane_mask, [0] * LANES)
            ties = _mask_word(builder, builder.and_(equal, use))
            any_nan = builder.icmp_unsigned("!=", builder.bitcast(nan, ir.IntType(LANES)),
                                            ir.Constant(ir.IntType(LANES), 0))
            return context.make_tuple(builder, signature.return_type, [least, ties, any_nan])
        return sig, codegen

    def _count_zeros(name):
        @intrinsic
        def count(typingctx, mask):
            sig = types.int64(types.int64)

            def codegen(context, builder, signature, args):
                fn = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(_I64, [_I64, ir.IntType(1)]),
                    f"llvm.{name}.i64")
                return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 1)])
            return sig, codegen
        return count

    _cttz = _count_zeros("cttz")
    _ctlz = _count_zeros("ctlz")

    @overload(lane_steps, target="cpu")
    def _lane_steps_typed(row_keys, lineage, q0, t, thread_shift, max_key):
        return lambda row_keys, lineage, q0, t, thread_shift, max_key: _lane_steps(
            row_keys, lineage, q0, t, thread_shift, max_key)

    @overload(lane_members, target="cpu")
    def _lane_members_typed(variables, member_bits):
        return lambda variables, member_bits: _lane_members(variables, member_bits)

    @overload(lane_min, target="cpu")
    def _lane_min_typed(keys, i0, counted, orient, none):
        return lambda keys, i0, counted, orient, none: _lane_min(keys, i0, counted, orient,
                                                                 none)

    @overload(lowest_lane, target="cpu")
    def _lowest_lane_typed(mask):
        return lambda mask: _cttz(mask)

    @overload(highest_lane, target="cpu")
    def _highest_lane_typed(mask):
        return lambda mask: 63 - _ctlz(mask)
except ImportError:                  # the plain bodies still run without numba
    pass
