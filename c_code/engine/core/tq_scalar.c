/* tq_scalar.c: see tq_scalar.h. */
#include "tq_scalar.h"

#include <math.h>

/* Each type's kind ('b'ool, 'i'nt, 'u'nsigned, 'f'loat, 'c'omplex) and size. */
static const struct {
    char kind;
    unsigned char size;
} types[TQ_N_SCALARS] = {
    [TQ_BOOL] = {'b', 1},      [TQ_INT8] = {'i', 1},        [TQ_UINT8] = {'u', 1},   [TQ_INT16] = {'i', 2},
    [TQ_UINT16] = {'u', 2},    [TQ_INT32] = {'i', 4},       [TQ_UINT32] = {'u', 4},  [TQ_INT64] = {'i', 8},
    [TQ_UINT64] = {'u', 8},    [TQ_FLOAT16] = {'f', 2},     [TQ_FLOAT32] = {'f', 4}, [TQ_FLOAT64] = {'f', 8},
    [TQ_COMPLEX64] = {'c', 8}, [TQ_COMPLEX128] = {'c', 16},
};

static int known(tq_scalar type) { return (unsigned)type < TQ_N_SCALARS; }

size_t tq_scalar_size(tq_scalar type) { return known(type) ? types[type].size : 0; }

/* The bytes of one float of a float or complex type (a complex is two). */
static unsigned float_size(tq_scalar type)
{
    return types[type].kind == 'c' ? types[type].size / 2u : types[type].size;
}

int tq_casts_safely(tq_scalar from, tq_scalar to)
{
    if (!known(from) || !known(to))
        return 0;
    char f = types[from].kind, t = types[to].kind;
    unsigned fs = types[from].size, ts = types[to].size;
    if (from == to || f == 'b')
        return 1; /* bool is 0 or 1 in every type */
    switch (t) {
    case 'b': return 0;
    case 'i': return (f == 'i' && ts >= fs) || (f == 'u' && ts > fs);
    case 'u': return f == 'u' && ts >= fs;
    case 'f':
    case 'c':
        if (f == 'i' || f == 'u') /* an integer into a float wider than it; 64-bit integers into double too */
            return float_size(to) > fs || (fs == 8 && float_size(to) == 8);
        if (f == 'f')
            return float_size(to) >= fs;
        return t == 'c' && ts >= fs;
    default: return 0;
    }
}

/* Bits of significand (the hidden one counted) and of the largest integer of a float type. */
static void float_bits(tq_scalar type, int *significand, int *width)
{
    switch (float_size(type)) {
    case 2: *significand = 11, *width = 16; break;
    case 4: *significand = 24, *width = 128; break;
    default: *significand = 53, *width = 1024; break;
    }
}

int tq_integer_fits(uint64_t magnitude, int negative, tq_scalar to)
{
    if (!known(to))
        return 0;
    if (!magnitude)
        return 1;
    unsigned bits = types[to].size * 8u;
    switch (types[to].kind) {
    case 'b': return !negative && magnitude == 1;
    case 'u': return !negative && (bits == 64 || magnitude >> bits == 0);
    case 'i': return magnitude <= (negative ? (uint64_t)1 << (bits - 1) : ((uint64_t)1 << (bits - 1)) - 1);
    default: {
        int significand, width;
        float_bits(to, &significand, &width);
        int high = 64 - __builtin_clzll(magnitude), low = __builtin_ctzll(magnitude);
        return high - low <= significand && high <= width; /* float16: at most 0xffe0, 65504 */
    }
    }
}

int tq_float_stays_finite(double value, tq_scalar to)
{
    if (!known(to) || (types[to].kind != 'f' && types[to].kind != 'c'))
        return 0;
    switch (float_size(to)) {
    case 2: return fabs(value) < 65520.0; /* float16's largest is 65504; from 65520 on it rounds to inf */
    case 4: return !isinf((float)value);
    default: return 1;
    }
}
