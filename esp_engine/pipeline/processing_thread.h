// Shared by the pipeline's source files, not part of its interface.
#pragma once

namespace espgw::pipeline {

// Set while this thread is inside Pipeline::process_queued: a sink that submits must
// neither process nor wait for a delivery (it may be its own).
extern constinit thread_local bool processing_here;

}  // namespace espgw::pipeline
