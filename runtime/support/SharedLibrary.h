//===- SharedLibrary.h - Libraries opened when first needed -----*- C++ -*-===//
//
// Large or optional libraries (cuBLASLt, NCCL) are opened with dlopen when
// a run first needs them, so mimo-run starts, and runs everything else, on
// machines without them; the caller binds the symbols it uses into a table
// of function pointers.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_SUPPORT_SHAREDLIBRARY_H
#define MIMO_RUNTIME_SUPPORT_SHAREDLIBRARY_H

#include <initializer_list>
#include <string>
#include <type_traits>

namespace mimo {

/// The first of `names` that loads; nullptr with `error` set to "cannot
/// load WHAT (the loader's reasons): FIX" when none does.
void *openSharedLibrary(std::initializer_list<const char *> names,
                        const std::string &what, const std::string &fix,
                        std::string &error);

/// The address of `symbol` in `library` (nullptr when it has none).
void *sharedLibrarySymbol(void *library, const char *symbol);

/// Binds `slot` to `symbol`; a missing one sets `error` (the first only)
/// to "WHAT has no SYMBOL" and `note`.
template <typename F>
void bindSymbol(void *library, F &slot, const char *symbol,
                const std::string &what, std::string &error,
                const std::string &note = "") {
  slot = reinterpret_cast<F>(sharedLibrarySymbol(library, symbol));
  if (!slot && error.empty())
    error = what + " has no " + symbol + note;
}

} // namespace mimo

#endif // MIMO_RUNTIME_SUPPORT_SHAREDLIBRARY_H
