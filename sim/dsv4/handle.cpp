#include "sim/dsv4/handle.h"

#include "reference/core/error.h"

namespace kvlab::sim {

void LayerCacheHandle::write_swa(const Dsv4AppendSwaArgs& args, void* stream) const {
  backend_->append_swa(views_->swa, args, stream);
}

const Dsv4ClassicalView& LayerCacheHandle::read_classical_view() const {
  KVLAB_REQUIRE(
      views_->kind != Dsv4LayerKind::kSWA,
      "layer " << views_->layer << " is an SWA layer: it has no classical (compressed) pool");
  return views_->classical;
}

const Dsv4IndexerView& LayerCacheHandle::read_indexer_view() const {
  KVLAB_REQUIRE(views_->kind == Dsv4LayerKind::kCSA,
                "layer " << views_->layer << " is a " << to_string(views_->kind)
                         << " layer: only CSA layers have indexer keys");
  return views_->indexer;
}

const Dsv4StreamView& LayerCacheHandle::stream_view() const {
  KVLAB_REQUIRE(views_->kind != Dsv4LayerKind::kSWA,
                "layer " << views_->layer << " is an SWA layer: it has no compressor state");
  return views_->stream;
}

const Dsv4StreamView& LayerCacheHandle::indexer_stream_view() const {
  KVLAB_REQUIRE(views_->kind == Dsv4LayerKind::kCSA,
                "layer " << views_->layer << " is a " << to_string(views_->kind)
                         << " layer: only CSA layers have an indexer compressor");
  return views_->indexer_stream;
}

}  // namespace kvlab::sim
