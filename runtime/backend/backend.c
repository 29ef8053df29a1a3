/* backend.c: the backends by name (backend.h). */
#include "backend.h"
#include "common/util.h"
#include <string.h>

extern const skv_backend skv_backend_cpu, skv_backend_cuda;
static const skv_backend *const backends[] = {&skv_backend_cpu, &skv_backend_cuda};

const skv_backend *skv_backend_get(const char *name) {
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++)
        if (name && !strcmp(backends[i]->name, name)) return backends[i];
    skv_error("unknown device '%s' (%s)", name ? name : "", skv_backend_names());
    return NULL;
}

const char *skv_backend_names(void) { return "cpu, cuda"; }
