// A reader-writer lock that doesn't starve writers. Lookups on the data path take it
// shared from every core, all the time; glibc's default rwlock (behind std::shared_mutex)
// prefers readers, so under that load a policy or SA change could wait indefinitely.
// With writer preference a waiting writer holds back new readers until it is done.
// Readers still never block each other. Don't take it shared twice on one thread: a
// writer queued between the two would deadlock it.
#pragma once

#include <pthread.h>

#include <cerrno>
#include <system_error>

namespace espgw::xfrm {

class WriterPreferringMutex {
 public:
  WriterPreferringMutex() {
    pthread_rwlockattr_t attributes;
    pthread_rwlockattr_init(&attributes);
    pthread_rwlockattr_setkind_np(&attributes, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    const int error = pthread_rwlock_init(&lock_, &attributes);
    pthread_rwlockattr_destroy(&attributes);
    if (error != 0) throw std::system_error(error, std::generic_category(), "pthread_rwlock_init");
  }
  ~WriterPreferringMutex() { pthread_rwlock_destroy(&lock_); }
  WriterPreferringMutex(const WriterPreferringMutex&) = delete;
  WriterPreferringMutex& operator=(const WriterPreferringMutex&) = delete;

  // The names std::unique_lock and std::shared_lock expect.
  void lock() { check(pthread_rwlock_wrlock(&lock_)); }
  void unlock() { pthread_rwlock_unlock(&lock_); }
  void lock_shared() { check(pthread_rwlock_rdlock(&lock_)); }
  void unlock_shared() { pthread_rwlock_unlock(&lock_); }

 private:
  // Fails only on misuse (EDEADLK) or too many readers (EAGAIN).
  static void check(int error) {
    if (error != 0) throw std::system_error(error, std::generic_category(), "pthread_rwlock");
  }

  pthread_rwlock_t lock_;
};

}  // namespace espgw::xfrm
