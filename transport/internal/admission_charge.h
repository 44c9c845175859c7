// AdmissionCharge: the admission charge of one received payload. It gives
// the payload's bytes back to the PullAdmission (transport.h) when it is
// destroyed: attached to the payload's Buffer once the handler gets the
// payload, owned by the transport until then, so that every path (handled,
// dropped, failed, shut down) releases exactly once.
//
// Thread-safety: destroyed on whichever thread drops it; the admission is
// thread-safe by contract.
#ifndef STAGGER_TRANSPORT_INTERNAL_ADMISSION_CHARGE_H_
#define STAGGER_TRANSPORT_INTERNAL_ADMISSION_CHARGE_H_

#include <cstddef>
#include <cstdint>

#include "transport/buffer.h"
#include "transport/transport.h"

namespace stagger::transport_internal {

class AdmissionCharge final : public transport::Buffer::Attachment {
 public:
  // `admission` is not owned and must outlive the charge.
  AdmissionCharge(transport::PullAdmission* admission, uint64_t peer,
                  size_t bytes)
      : admission_(admission), peer_(peer), bytes_(bytes) {}
  ~AdmissionCharge() override { admission_->Release(peer_, bytes_); }
  AdmissionCharge(const AdmissionCharge&) = delete;
  AdmissionCharge& operator=(const AdmissionCharge&) = delete;

 private:
  transport::PullAdmission* const admission_;
  const uint64_t peer_;
  const size_t bytes_;
};

}  // namespace stagger::transport_internal

#endif  // STAGGER_TRANSPORT_INTERNAL_ADMISSION_CHARGE_H_
