//===- SharedLibrary.cpp - Libraries opened when first needed -------------===//

#include "runtime/support/SharedLibrary.h"

#include <dlfcn.h>

namespace mimo {

void *openSharedLibrary(std::initializer_list<const char *> names,
                        const std::string &what, const std::string &fix,
                        std::string &error) {
  std::string tried;
  for (const char *name : names) {
    if (void *library = dlopen(name, RTLD_NOW | RTLD_LOCAL))
      return library;
    const char *why = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (why ? why : name);
  }
  error = "cannot load " + what + " (" + tried + "): " + fix;
  return nullptr;
}

void *sharedLibrarySymbol(void *library, const char *symbol) {
  return library ? dlsym(library, symbol) : nullptr;
}

} // namespace mimo
