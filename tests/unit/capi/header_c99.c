/* Compiles anyep.h as strict C99 (-std=c99 -pedantic, warnings are errors): the public header
 * stays C-clean. Built, not run. */
#include "anyep/anyep.h"

int anyep_header_c99_check(void);
int anyep_header_c99_check(void) {
  anyep_config_t cfg;
  anyep_config_init(&cfg);
  return (int)cfg.struct_size + (int)ANYEP_VERSION_MAJOR + (int)ANYEP_SUCCESS;
}
