/* hugemem.c: anonymous, 2 MiB-aligned mappings advised for transparent huge pages (see
 * hugemem.h); small requests and sanitizer builds use the heap. */
#include "hugemem.h"
#include "common/util.h"
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define SKV_HUGE_HEAP_ONLY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SKV_HUGE_HEAP_ONLY 1
#endif
#endif

#define HUGE_PAGE ((size_t)2 << 20)

/* Whether an n-byte request is mapped (else it is a heap block): the same answer in
 * skv_huge_alloc and skv_huge_free. */
static int mapped(size_t n) {
#ifdef SKV_HUGE_HEAP_ONLY
    (void)n;
    return 0;
#else
    return n >= HUGE_PAGE / 2;
#endif
}

static size_t mapped_len(size_t n) { return (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1); }

void *skv_huge_alloc(size_t n, const char *what) {
    if (!mapped(n)) {
        void *p = skv_aligned_alloc(n, what);
        if (p) memset(p, 0, n ? n : 1);
        return p;
    }
    const size_t len = mapped_len(n);
    if (len < n || len + HUGE_PAGE < len) {
        skv_error("out of memory allocating %zu bytes (%s)", n, what ? what : "buffer");
        return NULL;
    }
    /* over-map by one huge page, then trim to a 2 MiB-aligned run of len bytes */
    uint8_t *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        skv_error("out of memory allocating %zu bytes (%s): %s", n, what ? what : "buffer", strerror(errno));
        return NULL;
    }
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    const size_t tail = (size_t)(raw + len + HUGE_PAGE - (p + len));
    if (tail) munmap(p + len, tail);
    const char *env = getenv("SKV_HUGEPAGES");
    if (!(env && !strcmp(env, "0"))) madvise(p, len, MADV_HUGEPAGE);   /* advice only: ignore failure */
    return p;
}

void skv_huge_free(void *p, size_t n) {
    if (!p) return;
    if (mapped(n)) munmap(p, mapped_len(n));
    else free(p);
}
