// anyep/src/capi/ht_options.h — the HT side of the C API's inputs: anyep_ht_options_t read
// (versioned, defaults from DeepEP's tables), the HT buffer size a group gets when the config
// says 0, and the check that a handle's options fit the group's buffer. Refusals name the field.
#pragma once

#include <cstdint>

#include "anyep/anyep.h"
#include "runtime/ht/validate.h"

namespace anyep::capi {

struct HTOptions {
  runtime::HTConfig dispatch, combine;
  int64_t expert_alignment = 1;
};

// `o` NULL: every default. Chunk sizes left 0 take DeepEP's recommended row for `num_ranks`.
HTOptions read_ht_options(const anyep_ht_options_t* o, int num_ranks);

// The HT buffer bytes of cfg->ht_buffer_bytes = 0: what the default options need for rows of
// `hidden` elements (sized as DeepEP's hint: 2 bytes per element, FP8 scales, top-k 16).
int64_t ht_default_bytes(int64_t hidden, int num_ranks);

// Throws InvalidArgument naming `options->...` and cfg->ht_buffer_bytes when a call with these
// slots needs more than the group's HT buffer; else the call's geometry (its channels).
ht::Geometry check_ht_fits(const runtime::HTConfig& c, const char* which, uint64_t slot_bytes, int num_ranks,
                           int64_t buffer_bytes);

}  // namespace anyep::capi
