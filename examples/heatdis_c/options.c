/* heatdis-c's options, as rtft-heatdis's (examples/heatdis): "--name value" pairs, every value
 * checked for its range before anything is allocated. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"

static const char kUsage[] =
    "usage: heatdis-c --rows R --cols C --iterations I [--output FILE] [--protect-every K]\n"
    "                 [--l3-every M] [--ckpt-dir DIR] [--residual-every N]\n";

/* `text` as an integer in [lo, hi], else a message naming `name`. */
static int integer(const char* name, const char* text, int64_t lo, int64_t hi, int64_t* out) {
  char* end = NULL;
  long long v;
  errno = 0;
  v = strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "heatdis-c: %s: '%s' is not an integer from %" PRId64 " to %" PRId64 "\n", name,
            text, lo, hi);
    return -1;
  }
  *out = v;
  return 0;
}

int parse_options(int argc, char** argv, options_t* o) {
  const int64_t big = (int64_t)1 << 30, huge = (int64_t)1 << 40;
  int i, bad = 0;
  memset(o, 0, sizeof(*o));
  o->protect_every = 100;
  o->residual_every = 100;
  for (i = 1; i < argc && !bad; i += 2) {
    const char *name = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) return fputs(kUsage, stdout), 0;
    if (!value) {
      fprintf(stderr, "heatdis-c: %s: a value is missing\n", name);
      bad = 1;
    } else if (strcmp(name, "--rows") == 0) {
      bad = integer(name, value, 3, big, &o->rows);
    } else if (strcmp(name, "--cols") == 0) {
      bad = integer(name, value, 3, big, &o->cols);
    } else if (strcmp(name, "--iterations") == 0) {
      bad = integer(name, value, 1, huge, &o->iterations);
    } else if (strcmp(name, "--protect-every") == 0) {
      bad = integer(name, value, 1, big, &o->protect_every);
    } else if (strcmp(name, "--l3-every") == 0) {
      bad = integer(name, value, 0, big, &o->l3_every);
    } else if (strcmp(name, "--residual-every") == 0) {
      bad = integer(name, value, 1, huge, &o->residual_every);
    } else if (strcmp(name, "--output") == 0) {
      o->output = value;
    } else if (strcmp(name, "--ckpt-dir") == 0) {
      o->ckpt_dir = value;
    } else {
      fprintf(stderr, "heatdis-c: %s: unknown option\n", name);
      bad = 1;
    }
  }
  if (!bad && (o->rows == 0 || o->cols == 0 || o->iterations == 0)) {
    fprintf(stderr, "heatdis-c: --rows, --cols and --iterations are required\n");
    bad = 1;
  }
  if (!bad && o->rows > ((int64_t)1 << 31) / o->cols) {
    fprintf(stderr, "heatdis-c: --rows x --cols: at most 2^31 cells\n");
    bad = 1;
  }
  if (!bad && o->output && strlen(o->output) > 4000) {
    fprintf(stderr, "heatdis-c: --output: a path of at most 4000 bytes\n");
    bad = 1;
  }
  if (bad) fputs(kUsage, stderr);
  return bad ? 2 : -1;
}
