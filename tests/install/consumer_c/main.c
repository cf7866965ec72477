/* Uses only the installed rtft/rtft.h and librt-ft: proves that find_package(rtft) works for a
 * C project, and that the C API checkpoints and restores a float64 array. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <rtft/rtft.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(rtft_status_t s, const char* what) {
  if (s != RTFT_OK) printf("consumer_c: %s: %d %s\n", what, s, rtft_last_error());
  return s == RTFT_OK;
}

int main(void) {
  double field[12], back[12];
  const int64_t shape[2] = {3, 4};
  char dir[] = "/tmp/rtft-consumer-c-XXXXXX";
  rtft_state_t *state = NULL, *fresh = NULL;
  rtft_ckpt_options_t opts;
  rtft_ckpt_t* ckpt = NULL;
  int i, ok = 1;
  for (i = 0; i < 12; ++i) field[i] = i / 7.0;
  if (!mkdtemp(dir)) return 1;
  ok = ok && check(rtft_state_create(&state), "state");
  ok = ok && check(rtft_state_add_tensor(state, "field", RTFT_FLOAT64, 2, shape, field), "add");
  ok = ok && check(rtft_ckpt_options_init(&opts), "options");
  opts.dir = dir;
  opts.pool_bytes = 128u << 20;
  ok = ok && check(rtft_ckpt_create(&opts, &ckpt), "create");
  ok = ok && check(rtft_ckpt_checkpoint(ckpt, 1, state), "checkpoint");
  ok = ok && check(rtft_ckpt_wait_persisted(ckpt, 1), "persisted");
  ok = ok && check(rtft_ckpt_destroy(ckpt), "destroy");
  ok = ok && check(rtft_state_create(&fresh), "fresh");
  ok = ok && check(rtft_state_add_tensor(fresh, "field", RTFT_FLOAT64, 2, shape, back), "add");
  ok = ok && check(rtft_ckpt_restore(dir, RTFT_CKPT_LATEST, fresh), "restore");
  ok = ok && memcmp(field, back, sizeof(field)) == 0;
  printf("float64 [3, 4] restored: %s\n", ok ? "identical" : "DIFFERENT");
  i = rtft_state_add_tensor(fresh, "x", 99, 2, shape, back);
  printf("dtype 99: %d %s\n", i, rtft_last_error());
  rtft_state_destroy(state);
  rtft_state_destroy(fresh);
  printf("consumer_c: %s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
