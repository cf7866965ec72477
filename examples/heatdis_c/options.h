/* heatdis-c's options (those of rtft-heatdis, examples/heatdis). */
#ifndef HEATDIS_C_OPTIONS_H_
#define HEATDIS_C_OPTIONS_H_

#include <stdint.h>

typedef struct {
  int64_t rows, cols, iterations, protect_every, l3_every, residual_every;
  const char *output, *ckpt_dir; /* NULL when not given */
} options_t;

/* -1: go on; otherwise the exit code (0 after --help, 2 after a bad option, said on stderr). */
int parse_options(int argc, char** argv, options_t* o);

#endif /* HEATDIS_C_OPTIONS_H_ */
