/*
 * inputs.h: an op's inputs as the torch shim encodes them while recording (record_shapes), and
 * their decoding at stop into the text torch.profiler(record_shapes=True) writes.
 *
 * The shim writes the payload on the hot path with stores only (no formatting, no allocation):
 * the core carries it untouched in an XSP_DATA_INPUTS event (recorder.h) and decodes it here at
 * merge time into four string attributes of the op's span, each JSON text equal to the value
 * torch.profiler puts in its Kineto trace for the same op:
 *   input_dims       "Input Dims"      [[2, 3], [3], []]
 *   input_types      "Input type"      ["float", "float", "Scalar"]
 *   input_strides    "Input Strides"   [[3, 1], [1], []]
 *   concrete_inputs  "Concrete Inputs" ["", "", "1"]
 * and a fifth, overload, the operator's overload name ("" for the default overload; absent for
 * a RecordFunction without a schema: a user scope or a backward node).
 *
 * Payload layout (little-endian host order, no alignment; all counts bounded by the payload):
 *   u8 version (1), u8 overload_len, overload bytes, u8 flags (XSP_IN_SCHEMA: has an overload;
 *   XSP_IN_TRUNCATED: inputs past the last item did not fit), u16 n_items, then n_items items,
 *   each a tag byte and its body:
 *     'T' tensor      u8 dtype (c10::ScalarType), u8 ndim, u8 strided, ndim i64 sizes,
 *                     and when strided ndim i64 strides
 *     'U' a tensor torch shows without shape: undefined, nested or symbolic (type "")
 *     'L' tensor list u16 n, then n items each 'T' or 'U'
 *     'i' int i64     'd' double f64     'b' bool u8     'c' complex f64 re, f64 im
 *     'I' int list    u8 n, n i64        'D' double list u8 n, n f64   'B' bool list u8 n, n u8
 *     'N' None ('' everywhere)           'O' anything else torch shows as '' (strings, long
 *                                         lists, lists of tensors-or-None, ...)
 * Torch's rules followed by the shim: a scalar list is kept only with at most 30 elements
 * (longer: 'O'); an empty list is an int list.
 */
#ifndef XSP_INPUTS_H
#define XSP_INPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

#define XSP_IN_VERSION 1u
#define XSP_IN_SCHEMA 1u        /* flags: the op has a schema, overload is meaningful */
#define XSP_IN_TRUNCATED 2u     /* flags: the encoder ran out of room */
#define XSP_IN_MAX_DTYPES 64u

/* Sets the dtype names used by the decoder: names[i] is the name torch prints for
 * c10::ScalarType i ("float", "long int", "c10::Half", ...), for i < n (n at most
 * XSP_IN_MAX_DTYPES; more are ignored).  The strings are copied.  A dtype without a name
 * decodes as "dtype<i>".  Returns 0, or -1 on allocation failure (the old names stay).
 * Thread-safe against itself and against decoding (a lock, never taken on a hot path). */
int xsp_inputs_set_dtype_names(const char *const *names, uint32_t n);

/* Keys of the attributes xsp_inputs_decode adds, interned once per trace. */
typedef struct xsp_inputs_keys {
    uint32_t dims, types, strides, concrete, overload, truncated;
} xsp_inputs_keys;

/* Interns the attribute keys into t's strings. Returns 0, or -1 on allocation failure. */
int xsp_inputs_keys_init(xsp_trace *t, xsp_inputs_keys *k);

/* Decodes payload p (len bytes) and appends its attributes to t->attrs (the caller's span gets
 * them: it adds *n_added to its attr_n), interning the texts into t->strings.  Returns 0; 1
 * when the payload is malformed (nothing appended: the caller counts it); -1 on allocation
 * failure (attributes appended so far stay in t->attrs, unreferenced). */
int xsp_inputs_decode(xsp_trace *t, const xsp_inputs_keys *k, const uint8_t *p, uint32_t len,
                      uint32_t *n_added);

/* Formats a double as torch's IValue printer does ("0.", "2.5", "0.10000000000000001",
 * "-1.4999999999999999e-07", "1e+20", "inf", "nan") into buf (size >= 32). Cannot fail. */
void xsp_inputs_fmt_double(double d, char *buf, size_t size);

#endif
