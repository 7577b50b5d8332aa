/*
 * tq_scalar: the element types of a component, and the one rule of which
 * values a component takes: which type casts safely into which (numpy's
 * "safe" casting, the same table on numpy 1.x and 2.x), and whether an
 * integer keeps its value in a type.  Python asks this rule
 * (theano_queue/core/schema.py, through _engine.casts_safely and
 * _engine.values_fit); the engine's put follows it without asking Python.
 * Plain C, no state.
 */
#ifndef TQ_SCALAR_H
#define TQ_SCALAR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Theano's element types.  The gather reads and writes all but the complex
 * ones (tq_gather_converts). */
typedef enum {
    TQ_BOOL = 0,
    TQ_INT8,
    TQ_UINT8,
    TQ_INT16,
    TQ_UINT16,
    TQ_INT32,
    TQ_UINT32,
    TQ_INT64,
    TQ_UINT64,
    TQ_FLOAT16,
    TQ_FLOAT32,
    TQ_FLOAT64,
    TQ_COMPLEX64,
    TQ_COMPLEX128,
    TQ_N_SCALARS
} tq_scalar;

/* Bytes of one element (0 for no type). */
size_t tq_scalar_size(tq_scalar type);
/* Whether every value of `from` is a value of `to`, as numpy's safe casting
 * has it (int64 into float64 included). */
int tq_casts_safely(tq_scalar from, tq_scalar to);
/* Whether the integer of this magnitude and sign is exactly a value of `to`:
 * within an integer type's range (0 and 1 for bool), or exactly
 * representable in a float type (its real part, for a complex one). */
int tq_integer_fits(uint64_t magnitude, int negative, tq_scalar to);
/* Whether a finite double stays finite in float type `to` (a float of
 * another kind: 0). */
int tq_float_stays_finite(double value, tq_scalar to);

/* float16 and float, each way (inline: the gather's loops convert every element). */
/* IEEE half to float: the exponent rebiased, subnormals normalised, inf/NaN kept. */
static inline float tq_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0x1f)
        bits = sign | 0x7f800000u | (mant << 13);
    else if (exp)
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    else if (!mant)
        bits = sign;
    else {
        exp = 113;
        while (!(mant & 0x400))
            mant <<= 1, exp--;
        bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Float to IEEE half, rounded to nearest even: overflow to inf, NaN kept a NaN, subnormals made. */
static inline uint16_t tq_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, mant = x & 0x7fffff, half, rest, mid;
    int e = (int)exp - 127 + 15, shift;
    if (exp == 0xff)
        return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    if (e >= 0x1f)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) { /* a subnormal half (or 0): the significand shifted past the exponent's floor */
        if (e < -10)
            return (uint16_t)sign;
        shift = 14 - e;
        mant |= 0x800000;
        half = mant >> shift, rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    } else {
        half = ((uint32_t)e << 10) | (mant >> 13), rest = mant & 0x1fff, mid = 0x1000;
    }
    if (rest > mid || (rest == mid && (half & 1)))
        half++; /* a carry into the exponent is right: up to the next power of two, or inf */
    return (uint16_t)(sign | half);
}

#ifdef __cplusplus
}
#endif
#endif /* TQ_SCALAR_H */
