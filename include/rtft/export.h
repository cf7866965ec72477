// Symbol visibility for librt-ft. The library is built with -fvisibility=hidden; only
// declarations marked RTFT_EXPORT are part of its ABI.
#pragma once

#if defined(RTFT_BUILDING_LIBRARY)
#define RTFT_EXPORT [[gnu::visibility("default")]]
#else
#define RTFT_EXPORT
#endif
