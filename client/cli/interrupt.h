// Ends `stagger restore` cleanly on SIGINT or SIGTERM: the file being
// written (its ".partial" name) is removed, one line says what was left
// complete, and the process exits 128 + the signal (130, 143).
//
// The handler does only what is async-signal-safe: unlink(), write() and
// _exit(). What it reports is kept in fixed buffers that the writing thread
// updates before and after each file.
//
// Thread-safety: Install once; Writing and Wrote from one thread at a time.
#ifndef STAGGER_CLIENT_CLI_INTERRUPT_H_
#define STAGGER_CLIENT_CLI_INTERRUPT_H_

#include <string>

namespace stagger::client {

// Installs the handlers for a restore of `files` files into `dir`.
void InstallRestoreInterrupts(const std::string& dir, int files);
// `partial` (a path) is being written now; "" when none is.
void RestoreWriting(const std::string& partial);
// One more file is complete.
void RestoreWrote();

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CLI_INTERRUPT_H_
