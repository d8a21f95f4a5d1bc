#include "capi/ht_options.h"

#include <cstring>
#include <string>

#include "common/error.h"
#include "runtime/ht/validate.h"  // ht:: limits and geometry, through the runtime contract

namespace anyep::capi {
namespace {

using std::to_string;

constexpr size_t kOptionsV1 = sizeof(anyep_ht_options_t);
constexpr size_t kMaxOptionsBytes = 64 * 1024;  // larger: not a size (an uninitialised struct)
constexpr int32_t kDefaultSms = 20;             // DeepEP's Buffer.num_sms

// DeepEP's recommended NVLink chunks per rank count (deep_ep/buffer.py at 567632d, as
// python/anyep/buffer.py): dispatch send, dispatch receive ring, combine send, combine ring. A
// count not in the table takes the next larger row (intranode HT reaches 16 ranks).
struct Row {
  int ranks, d_send, d_recv, c_send, c_recv;
};
constexpr Row kTable[] = {{2, 24, 256, 10, 256}, {4, 6, 256, 9, 256}, {8, 6, 256, 4, 256}, {16, 36, 288, 4, 288}};

const Row& row_for(int num_ranks) {
  for (const Row& r : kTable)
    if (r.ranks >= num_ranks) return r;
  return kTable[sizeof kTable / sizeof kTable[0] - 1];
}

int64_t positive_or(int32_t v, int64_t fallback, const char* field) {
  if (v < 0) throw InvalidArgument(std::string(field) + " is " + to_string(v) + ", must be 0 (default) or positive");
  return v == 0 ? fallback : v;
}

}  // namespace

HTOptions read_ht_options(const anyep_ht_options_t* in, int num_ranks) {
  anyep_ht_options_t o;
  std::memset(&o, 0, sizeof o);
  if (in != nullptr) {
    const size_t size = in->struct_size;
    if (size < kOptionsV1 || size > kMaxOptionsBytes)
      throw InvalidArgument("options->struct_size is " + to_string(size) +
                            ", not a size of anyep_ht_options_t this library knows (" + to_string(kOptionsV1) +
                            "): set it with anyep_ht_options_init()");
    const auto* bytes = reinterpret_cast<const unsigned char*>(in);
    for (size_t i = kOptionsV1; i < size; ++i)
      if (bytes[i] != 0)
        throw InvalidArgument("options sets a field at byte " + to_string(i) +
                              " that this library does not know: the program was built against a newer anyep.h");
    std::memcpy(&o, in, kOptionsV1);
  }
  const Row& r = row_for(num_ranks);
  HTOptions h;
  const int64_t sms = positive_or(o.num_sms, kDefaultSms, "options->num_sms");
  if (sms % 2 != 0) throw InvalidArgument("options->num_sms is " + to_string(sms) + ", must be even");
  h.dispatch.num_sms = h.combine.num_sms = sms;
  h.dispatch.chunk_send = positive_or(o.dispatch_chunk_send, r.d_send, "options->dispatch_chunk_send");
  h.dispatch.chunk_recv = positive_or(o.dispatch_chunk_recv, r.d_recv, "options->dispatch_chunk_recv");
  h.combine.chunk_send = positive_or(o.combine_chunk_send, r.c_send, "options->combine_chunk_send");
  h.combine.chunk_recv = positive_or(o.combine_chunk_recv, r.c_recv, "options->combine_chunk_recv");
  if (h.dispatch.chunk_recv < 2)
    throw InvalidArgument("options->dispatch_chunk_recv is " + to_string(h.dispatch.chunk_recv) + ", must be >= 2");
  if (h.combine.chunk_recv < 2)
    throw InvalidArgument("options->combine_chunk_recv is " + to_string(h.combine.chunk_recv) + ", must be >= 2");
  h.expert_alignment = positive_or(o.expert_alignment, 1, "options->expert_alignment");
  return h;
}

int64_t ht_default_bytes(int64_t hidden, int num_ranks) {
  const Row& r = row_for(num_ranks);
  const int64_t recv = r.d_recv > r.c_recv ? r.d_recv : r.c_recv;
  return runtime::ht_size_hint(hidden * 2, num_ranks, kDefaultSms, recv);
}

ht::Geometry check_ht_fits(const runtime::HTConfig& c, const char* which, uint64_t slot_bytes, int num_ranks,
                           int64_t buffer_bytes) {
  ht::Geometry g;
  if (const char* why = ht::make_geometry(num_ranks, static_cast<int>(c.num_sms), static_cast<int>(c.chunk_send),
                                          static_cast<int>(c.chunk_recv), slot_bytes, &g))
    throw InvalidArgument(std::string("options (") + which + "): " + why);
  if (static_cast<int64_t>(g.total_bytes()) > buffer_bytes)
    throw InvalidArgument(std::string("options->num_sms=") + to_string(c.num_sms) + " and " + which +
                          "_chunk_recv=" + to_string(c.chunk_recv) + " need an HT buffer of " +
                          to_string(g.total_bytes()) + " bytes; the group's is " + to_string(buffer_bytes) +
                          " (cfg->ht_buffer_bytes): create the group with at least that, or use fewer SMs");
  return g;
}

}  // namespace anyep::capi
