/* libFuzzer target: the ASTC encoder entry point of fuzz_targets.h (see there for what it
 * checks). Built and run by `make fuzz`; its crashes are replayed by `make test`. */
#include "tests/fuzz/fuzz_targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kiln_fuzz_astc_encode(data, size);
	return 0;
}
