#include "util/thread_name.h"

#include <pthread.h>

#include <string>

namespace espgw {

void name_this_thread(std::string_view name) {
  // pthread_setname_np fails (ERANGE) rather than truncate: cut here. A failure leaves
  // the inherited name, which is only cosmetic, so it is not reported.
  const std::string cut(name.substr(0, kThreadNameMax));
  pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace espgw
