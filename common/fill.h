/*
 * Writing one value to every element of a strided tensor in a backend's
 * memory, through the backend's mem_copy (no kernel): the outputs of
 * problems with a zero-size dimension, whose values are constants (O = 0
 * and LSE = -inf where no key is seen, zero gradients where nothing flows).
 */
#ifndef FFPA_COMMON_FILL_H
#define FFPA_COMMON_FILL_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* value converted to t's dtype. Dense runs go in one copy each (a dense
 * tensor in one); stride-0 dimensions are written once. Nothing for an
 * empty tensor. */
ffpa_status ffpa_fill_tensor(const ffpa_backend_i *b, void *state, const ffpa_tensor *t, float value,
                             char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
