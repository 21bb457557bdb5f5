// Stands in for another Abseil release's config.h (tests/CMakeLists.txt: the API headers must
// refuse to compile against an Abseil other than the one librayaccel was built with).
#define ABSL_LTS_RELEASE_VERSION 20990101
#define ABSL_LTS_RELEASE_PATCH_LEVEL 0
#define ABSL_OPTION_USE_STD_ANY 1
#define ABSL_OPTION_USE_STD_OPTIONAL 1
#define ABSL_OPTION_USE_STD_STRING_VIEW 1
#define ABSL_OPTION_USE_STD_VARIANT 1
