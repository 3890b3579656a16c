/* test_spool: the prefill spool (pdb_spool.h) on its own: segments drained in block order from
 * memory and disk with the right bytes; the spill bound holds and a full spool pauses the producer
 * until the writer drains (then it resumes); acknowledged segments and released transfers leave no
 * file; retained segments give their room to unsent ones (eviction); the TTL drops idle transfers
 * (never one in use); a spill file with a flipped byte is refused by its checksum and reported as
 * needing recomputation; a producer without a writer stops instead of waiting; a resume's writer
 * supersedes the old one; close removes the directory. */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pdb_spool.h"
#include "pdb_test_util.h"

enum { SEG = 1000 };
#define FILE_BYTES ((uint64_t)PDB_SPOOL_FILE_HEAD + SEG)

static void pattern(int64_t block, uint8_t *out) {
    uint32_t x = (uint32_t)block * 2654435761u + 7;
    for (int i = 0; i < SEG; i++) {
        x = x * 1103515245u + 12345u;
        out[i] = (uint8_t)(x >> 16);
    }
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static pdb_spool *open_spool(const char *parent, uint64_t spill_max, uint64_t mem_max, int64_t ttl_ms) {
    pdb_spool_opts o = {.dir = parent, .spill_max_bytes = spill_max, .mem_max_bytes = mem_max, .ttl_ms = ttl_ms};
    pdb_spool *sp = NULL;
    PDB_TEST_OK(pdb_spool_open(&o, &sp));
    return sp;
}

static pdb_spool_xfer *new_xfer(pdb_spool *sp, int64_t n_blocks) {
    uint8_t key[32] = {1, 2, 3};
    pdb_spool_xfer *x = NULL;
    PDB_TEST_OK(pdb_spool_create_xfer(sp, key, n_blocks, SEG, NULL, NULL, &x));
    assert_int_equal(strlen(pdb_spool_xfer_id(x)), 32);
    return x;
}

static void put(pdb_spool_xfer *x, int64_t b) {
    uint8_t d[SEG];
    pattern(b, d);
    PDB_TEST_OK(pdb_spool_put_segment(x, b, d, SEG));
}

/* take block b, check its bytes, mark it sent */
static void take_check(pdb_spool_xfer *x, uint64_t gen, int64_t b) {
    pdb_spool_seg seg;
    uint8_t want[SEG];
    PDB_TEST_OK(pdb_spool_take_segment(x, gen, b, &seg));
    assert_int_equal(seg.block, b);
    assert_int_equal(seg.bytes, SEG);
    pattern(b, want);
    assert_memory_equal(seg.data, want, SEG);
    pdb_spool_done_segment(x, &seg, 1);
}

static uint64_t stat_of(pdb_spool *sp, size_t off) {
    pdb_spool_stats st;
    pdb_spool_get_stats(sp, &st);
    return *(uint64_t *)((char *)&st + off);
}
#define STAT(sp, f) stat_of(sp, offsetof(pdb_spool_stats, f))

static void test_order_ack_release(void **state) {
    char *tmp = pdb_test_tmpdir("spool");
    pdb_spool *sp = open_spool(tmp, 1 << 20, 2 * SEG, 60000);
    const char *dir = pdb_spool_dir(sp);
    assert_int_equal(strncmp(dir, tmp, strlen(tmp)), 0); /* created under the given parent */
    pdb_spool_xfer *x = new_xfer(sp, 6);
    uint64_t gen = pdb_spool_attach_writer(x, NULL);
    PDB_TEST_OK(pdb_spool_begin_production(x, 0, NULL));
    for (int b = 0; b < 6; b++) put(x, b);
    pdb_spool_end_production(x, PDB_OK, NULL);
    assert_int_equal(STAT(sp, mem_bytes), 2 * SEG); /* two in memory, four spilled */
    assert_int_equal(STAT(sp, spill_files), 4);
    assert_int_equal(count_files(dir), 4);
    assert_int_equal(STAT(sp, spill_bytes), 4 * FILE_BYTES);
    for (int b = 0; b < 6; b++) take_check(x, gen, b); /* in order, memory and disk alike */
    assert_int_equal(STAT(sp, mem_bytes), 0);
    assert_int_equal(count_files(dir), 6); /* every sent segment retained until acknowledged */
    assert_true(pdb_spool_covers(x, 0));
    for (int b = 0; b < 6; b++) take_check(x, gen, b); /* a resume gets the same bytes again */
    int64_t rel = -1;
    PDB_TEST_OK(pdb_spool_ack(x, 3, &rel));
    assert_int_equal(rel, 3);
    assert_int_equal(count_files(dir), 3);
    assert_false(pdb_spool_covers(x, 2));
    assert_true(pdb_spool_covers(x, 3));
    pdb_spool_seg seg;
    assert_int_equal(pdb_spool_take_segment(x, gen, 1, &seg), PDB_NOT_FOUND); /* acknowledged: gone */
    char id[33];
    snprintf(id, sizeof id, "%s", pdb_spool_xfer_id(x));
    PDB_TEST_OK(pdb_spool_ack(x, 6, &rel)); /* everything: the transfer is released at once */
    assert_int_equal(rel, 3);
    assert_int_equal(count_files(dir), 0);
    assert_int_equal(STAT(sp, spill_bytes), 0);
    pdb_spool_xfer *y = NULL;
    assert_int_equal(pdb_spool_find_xfer(sp, id, &y), PDB_NOT_FOUND);
    assert_int_equal(pdb_spool_take_segment(x, gen, 4, &seg), PDB_IO);
    pdb_spool_unref_xfer(x);
    char dcopy[4096];
    snprintf(dcopy, sizeof dcopy, "%s", dir);
    pdb_spool_close(sp);
    struct stat sb;
    assert_int_not_equal(stat(dcopy, &sb), 0); /* the spool's own directory is removed */
    pdb_test_rmrf(tmp);
    free(tmp);
}

typedef struct {
    pdb_spool_xfer *x;
    int n;
    int done; /* segments put so far */
    pdb_status st;
    pthread_mutex_t mu;
} producer;

static void *producer_main(void *arg) {
    producer *p = arg;
    pdb_status st = pdb_spool_begin_production(p->x, 0, NULL);
    for (int b = 0; !st && b < p->n; b++) {
        uint8_t d[SEG];
        pattern(b, d);
        st = pdb_spool_put_segment(p->x, b, d, SEG);
        if (!st) {
            pthread_mutex_lock(&p->mu);
            p->done = b + 1;
            pthread_mutex_unlock(&p->mu);
        }
    }
    pdb_spool_end_production(p->x, st, st ? pdb_err_msg() : NULL);
    p->st = st;
    return NULL;
}

static int done_of(producer *p) {
    pthread_mutex_lock(&p->mu);
    int d = p->done;
    pthread_mutex_unlock(&p->mu);
    return d;
}

/* waits up to 5 s for done == want; returns the last value seen */
static int wait_done(producer *p, int want) {
    int d = 0;
    for (int i = 0; i < 500 && (d = done_of(p)) != want; i++) sleep_ms(10);
    return d;
}

static void test_bound_pauses_and_resumes(void **state) {
    char *tmp = pdb_test_tmpdir("spool");
    uint64_t bound = 3 * FILE_BYTES;
    pdb_spool *sp = open_spool(tmp, bound, SEG, 60000); /* memory: one segment */
    pdb_spool_xfer *x = new_xfer(sp, 10);
    uint64_t gen = pdb_spool_attach_writer(x, NULL);
    producer p = {.x = x, .n = 10};
    pthread_mutex_init(&p.mu, NULL);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, producer_main, &p), 0);
    /* nobody drains: one segment in memory + three on disk, then the producer waits */
    assert_int_equal(wait_done(&p, 4), 4);
    sleep_ms(200);
    assert_int_equal(done_of(&p), 4); /* still paused */
    assert_int_equal(STAT(sp, pauses), 1);
    assert_int_equal(STAT(sp, spill_bytes), bound);
    assert_true(STAT(sp, spill_peak) <= bound);
    assert_int_equal(count_files(pdb_spool_dir(sp)), 3);
    /* the writer sends block 0 (memory): it cannot be retained (the spill holds only unsent
     * segments), its memory goes back and the producer resumes with block 4 */
    take_check(x, gen, 0);
    assert_int_equal(wait_done(&p, 5), 5);
    assert_int_equal(STAT(sp, not_retained), 1);
    /* drain the rest in order while the producer keeps up; the bound holds throughout */
    for (int b = 1; b < 10; b++) {
        take_check(x, gen, b);
        assert_true(STAT(sp, spill_bytes) <= bound);
    }
    pthread_join(th, NULL);
    PDB_TEST_OK(p.st);
    assert_true(STAT(sp, spill_peak) <= bound);
    assert_true(STAT(sp, pauses) >= 1);
    PDB_TEST_OK(pdb_spool_ack(x, 10, NULL));
    assert_int_equal(count_files(pdb_spool_dir(sp)), 0);
    pdb_spool_unref_xfer(x);
    pdb_spool_close(sp);
    pthread_mutex_destroy(&p.mu);
    pdb_test_rmrf(tmp);
    free(tmp);
}

/* Retained (sent) segments give their room to unsent ones of another transfer. */
static void test_eviction(void **state) {
    char *tmp = pdb_test_tmpdir("spool");
    pdb_spool *sp = open_spool(tmp, 4 * FILE_BYTES, SEG, 60000);
    pdb_spool_xfer *a = new_xfer(sp, 4), *b = new_xfer(sp, 4);
    uint64_t ga = pdb_spool_attach_writer(a, NULL);
    PDB_TEST_OK(pdb_spool_begin_production(a, 0, NULL));
    for (int k = 0; k < 4; k++) {
        put(a, k);
        take_check(a, ga, k); /* sent at once: retained on disk */
    }
    pdb_spool_end_production(a, PDB_OK, NULL);
    assert_int_equal(STAT(sp, spill_files), 4);
    assert_true(pdb_spool_covers(a, 0));
    /* transfer b has no writer: its segments go to disk, taking the retained ones' room */
    PDB_TEST_OK(pdb_spool_begin_production(b, 0, NULL));
    put(b, 0);
    put(b, 1);
    pdb_spool_end_production(b, PDB_OK, NULL);
    assert_int_equal(STAT(sp, evicted), 2);
    assert_int_equal(STAT(sp, spill_files), 4);
    assert_false(pdb_spool_covers(a, 0)); /* the oldest sent ones went first */
    assert_true(pdb_spool_covers(a, 2));
    pdb_spool_unref_xfer(a);
    pdb_spool_unref_xfer(b);
    pdb_spool_close(sp);
    pdb_test_rmrf(tmp);
    free(tmp);
}

static void test_ttl(void **state) {
    char *tmp = pdb_test_tmpdir("spool");
    pdb_spool *sp = open_spool(tmp, 1 << 20, SEG, 100);
    pdb_spool_xfer *idle = new_xfer(sp, 3), *used = new_xfer(sp, 3);
    char idle_id[33];
    snprintf(idle_id, sizeof idle_id, "%s", pdb_spool_xfer_id(idle));
    PDB_TEST_OK(pdb_spool_begin_production(idle, 0, NULL));
    put(idle, 0);
    put(idle, 1);
    pdb_spool_end_production(idle, PDB_OK, NULL);
    assert_int_equal(count_files(pdb_spool_dir(sp)), 2);
    pdb_spool_unref_xfer(idle); /* nobody holds it any more */
    pdb_spool_xfer *f = NULL;
    PDB_TEST_OK(pdb_spool_find_xfer(sp, idle_id, &f)); /* before the TTL: still there */
    pdb_spool_unref_xfer(f);
    sleep_ms(400); /* the spool's timer runs every ttl/4 */
    assert_int_equal(pdb_spool_find_xfer(sp, idle_id, &f), PDB_NOT_FOUND);
    assert_int_equal(count_files(pdb_spool_dir(sp)), 0);
    assert_int_equal(STAT(sp, expired), 1);
    pdb_spool_reap(sp);
    PDB_TEST_OK(pdb_spool_find_xfer(sp, pdb_spool_xfer_id(used), &f)); /* referenced: never expired */
    pdb_spool_unref_xfer(f);
    pdb_spool_unref_xfer(used);
    pdb_spool_close(sp);
    pdb_test_rmrf(tmp);
    free(tmp);
}

static void test_corrupt_file_recomputed(void **state) {
    char *tmp = pdb_test_tmpdir("spool");
    pdb_spool *sp = open_spool(tmp, 1 << 20, SEG, 60000);
    pdb_spool_xfer *x = new_xfer(sp, 3);
    PDB_TEST_OK(pdb_spool_begin_production(x, 0, NULL)); /* no writer yet: straight to disk */
    for (int b = 0; b < 3; b++) put(x, b);
    pdb_spool_end_production(x, PDB_OK, NULL);
    char path[4300];
    snprintf(path, sizeof path, "%s/%s-1.seg", pdb_spool_dir(sp), pdb_spool_xfer_id(x));
    FILE *fh = fopen(path, "r+b");
    assert_non_null(fh);
    /* the header as documented: magic "PDBS", version 1, the transfer id, block 1, length */
    uint8_t h[PDB_SPOOL_FILE_HEAD];
    assert_int_equal(fread(h, 1, sizeof h, fh), sizeof h);
    assert_memory_equal(h, "PDBS", 4);
    assert_int_equal(h[4], 1);
    assert_int_equal(h[24], 1);
    assert_int_equal(h[32] | h[33] << 8, SEG);
    fseek(fh, PDB_SPOOL_FILE_HEAD + 500, SEEK_SET);
    int c = fgetc(fh);
    fseek(fh, PDB_SPOOL_FILE_HEAD + 500, SEEK_SET);
    fputc(c ^ 0x10, fh);
    fclose(fh);
    uint64_t gen = pdb_spool_attach_writer(x, NULL);
    take_check(x, gen, 0);
    pdb_spool_seg seg;
    assert_int_equal(pdb_spool_take_segment(x, gen, 1, &seg), PDB_CORRUPT); /* never handed out */
    assert_int_equal(STAT(sp, corrupt), 1);
    assert_int_equal(access(path, F_OK), -1); /* deleted */
    assert_false(pdb_spool_covers(x, 1));
    assert_int_equal(pdb_spool_take_segment(x, gen, 1, &seg), PDB_NOT_FOUND); /* -> recompute from 1 */
    PDB_TEST_OK(pdb_spool_begin_production(x, 1, NULL));
    put(x, 1);
    take_check(x, gen, 1); /* the recomputed bytes */
    put(x, 2);             /* already held: kept as is */
    pdb_spool_end_production(x, PDB_OK, NULL);
    take_check(x, gen, 2);
    pdb_spool_unref_xfer(x);
    pdb_spool_close(sp);
    pdb_test_rmrf(tmp);
    free(tmp);
}

static void test_no_writer_stops(void **state) {
    char *tmp = pdb_test_tmpdir("spool");
    pdb_spool *sp = open_spool(tmp, FILE_BYTES, SEG, 60000); /* room for one file */
    pdb_spool_xfer *x = new_xfer(sp, 3);
    PDB_TEST_OK(pdb_spool_begin_production(x, 0, NULL));
    put(x, 0);
    uint8_t d[SEG];
    pattern(1, d);
    assert_int_equal(pdb_spool_put_segment(x, 1, d, SEG), PDB_TOO_LARGE); /* does not wait */
    pdb_spool_end_production(x, PDB_TOO_LARGE, pdb_err_msg());
    uint64_t gen = pdb_spool_attach_writer(x, NULL);
    take_check(x, gen, 0);
    pdb_spool_seg seg;
    assert_int_equal(pdb_spool_take_segment(x, gen, 1, &seg), PDB_NOT_FOUND); /* a resume recomputes */
    /* wrong sizes and blocks are refused */
    assert_int_equal(pdb_spool_put_segment(x, 3, d, SEG), PDB_INVALID);
    assert_int_equal(pdb_spool_put_segment(x, 0, d, SEG - 1), PDB_INVALID);
    assert_int_equal(pdb_spool_begin_production(x, 4, NULL), PDB_INVALID);
    pdb_spool_unref_xfer(x);
    pdb_spool_close(sp);
    pdb_test_rmrf(tmp);
    free(tmp);
}

typedef struct {
    pdb_spool_xfer *x;
    uint64_t gen;
    pdb_status st;
} taker;

static void *taker_main(void *arg) {
    taker *t = arg;
    pdb_spool_seg seg;
    t->st = pdb_spool_take_segment(t->x, t->gen, 0, &seg);
    if (!t->st) pdb_spool_done_segment(t->x, &seg, 0);
    return NULL;
}

static void test_supersede_and_shutdown(void **state) {
    char *tmp = pdb_test_tmpdir("spool");
    pdb_spool *sp = open_spool(tmp, 1 << 20, SEG, 60000);
    pdb_spool_xfer *x = new_xfer(sp, 2);
    PDB_TEST_OK(pdb_spool_begin_production(x, 0, NULL));
    taker t = {.x = x, .gen = pdb_spool_attach_writer(x, NULL)};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, taker_main, &t), 0); /* waits: block 0 is being made */
    sleep_ms(100);
    uint64_t g2 = pdb_spool_attach_writer(x, NULL); /* a resume takes over */
    pthread_join(th, NULL);
    assert_int_equal(t.st, PDB_IO);
    assert_false(pdb_spool_writer_current(x, t.gen));
    assert_true(pdb_spool_writer_current(x, g2));
    /* a waiting writer and the producer are woken (PDB_IO) by shutdown */
    t = (taker){.x = x, .gen = g2};
    assert_int_equal(pthread_create(&th, NULL, taker_main, &t), 0);
    sleep_ms(50);
    pdb_spool_shutdown(sp);
    pthread_join(th, NULL);
    assert_int_equal(t.st, PDB_IO);
    uint8_t d[SEG];
    pattern(0, d);
    assert_int_equal(pdb_spool_put_segment(x, 0, d, SEG), PDB_IO);
    pdb_spool_end_production(x, PDB_IO, "shutdown");
    pdb_spool_unref_xfer(x);
    pdb_spool_close(sp);
    pdb_test_rmrf(tmp);
    free(tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_ack_release), cmocka_unit_test(test_bound_pauses_and_resumes),
        cmocka_unit_test(test_eviction),          cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_corrupt_file_recomputed), cmocka_unit_test(test_no_writer_stops),
        cmocka_unit_test(test_supersede_and_shutdown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
