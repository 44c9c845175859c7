// libstagger.so is built from the SDK's static libraries, linked whole;
// this file only gives the shared library target a source of its own.
namespace stagger {
const char* SdkLibraryName() { return "libstagger"; }
}  // namespace stagger
