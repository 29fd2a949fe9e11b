// <immintrin.h> without GCC 12's false warnings: it warns about the _mm512_undefined_*()
// placeholders inside its own intrinsic headers (GCC bug 105593); the warnings point into the
// header, so they are silenced there only, not in the code that includes this.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
