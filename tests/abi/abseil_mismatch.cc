// Compiled with tests/abi/fake_abseil first on the include path: must fail, saying why.
#include "rayaccel/registry.h"
