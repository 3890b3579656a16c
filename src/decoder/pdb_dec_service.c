/* pdb_dec_service: the scheduler. State: a FIFO of queued requests and a list of active ones
 * (each PREFILL or RUNNING), guarded by mu; only the scheduler thread touches an active
 * request's sequence and the model. One iteration = one batched forward over every RUNNING
 * request's next token plus one chunk of the oldest PREFILL request, so decode never waits for
 * a long prefill to finish. Admission mounts the longest cached prefix from the store (capped
 * so at least one prompt token is computed); a prefill chunk never crosses a full block's end,
 * and each new full block is written through the store's block writer the moment the prefill
 * reaches its end (so state pools are the state at the boundary), one block buffer at a time.
 * A request of n choices is one svc_req per choice sharing a svc_group (its settings and the
 * count of choices not yet finished); only choice 0 is queued and prefilled; when its prefill
 * ends the others are forked from it (svc_fork) and run as requests of their own.
 * Invariants: callbacks run on the scheduler thread without mu held; each choice gets exactly
 * one final event and the group's last one is marked last; a block that fails to load ends the
 * mounted prefix (never served). */
#include "pdb_dec_service.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_dec_model.h"
#include "pdb_store.h"

/* SVC_MOUNT_BATCH: cached blocks read and verified at once when a request is admitted (one pool
 * task each, at most the pool's threads), i.e. extra block buffers held by the service. 8: on a
 * 16-core host 8 at once mount at the rate of a plain sequential read of the same files
 * (bench/results/warm_mount_session11.md; each block's SHA-256 is one core's work). */
enum { SVC_CHUNK = 256, SVC_MOUNT_BATCH = 8 };
typedef enum { RQ_QUEUED = 0, RQ_PREFILL, RQ_RUNNING } rq_state;

/* What the choices of one request share (owned by them all: freed with the last). */
typedef struct svc_group {
    int n_choices, refs, left; /* left: choices started and not finished */
    int forked;
    int logprobs, top_logprobs;
    float freq, pres;
    int32_t *bias_ids;
    float *bias_vals;
    int n_bias;
    int (*mask)(void *, void *, float *, int64_t, int64_t);
    void (*mask_advance)(void *, void *, int32_t);
    void (*mask_init)(void *, void *);
    int (*mask_done)(void *, void *);
    void *mask_user;
    size_t mask_state_bytes;
} svc_group;

typedef struct svc_req {
    uint64_t id;
    int choice;
    svc_group *grp;
    int32_t *gen;          /* [cap_gen] tokens generated (kept when penalties need them) */
    int64_t cap_gen;
    float *raw;            /* [V] the logits before bias/penalties/mask (logprobs requests) */
    void *mask_state;      /* [grp->mask_state_bytes] */
    int32_t *ids;
    int64_t n_ids, max_tokens, prefilled, cached, generated;
    pdb_sample_params sp;
    pdb_sample_rng rng;
    int ignore_eos, cancel;
    rq_state state;
    pdb_dec_event_fn cb;
    void *user;
    pdb_dec_seq seq;
    pdb_store_stream *wst; /* open while the prefill writes the prompt's blocks */
    int wfailed;
    int32_t next_token;
    float *logits;
    struct svc_req *next;
} svc_req;

struct pdb_dec_service {
    pdb_dec_service_opts opts;
    char model_dir[4096];
    pdb_pool *pool;
    pdb_dec_model *model;
    pdb_store *store;
    float *block_buf;
    char *mount_buf;       /* [mount_batch] blocks: the cached prefix is read this many at a time */
    int mount_batch;
    int max_batch;         /* RUNNING requests per forward (a PREFILL chunk comes on top) */
    pdb_dec_seg *segs;     /* [max_batch + 1] the scheduler's batch, allocated at open */
    svc_req **owners;      /* [max_batch + 1] the request of each segment */
    char fp_hex[65];
    int32_t eos;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    uint64_t next_id;
    svc_req *queue, *queue_tail, *active;
    pdb_dec_stats stats;
};

static void group_unref(svc_group *g) {
    if (!g || --g->refs) return;
    free(g->bias_ids);
    free(g->bias_vals);
    free(g);
}

static void req_free(svc_req *r) {
    if (r->wst) pdb_store_stream_abort(r->wst);
    pdb_dec_seq_free(&r->seq);
    group_unref(r->grp); /* the scheduler thread (or close, after it) is the only one to touch groups */
    free(r->gen);
    free(r->raw);
    free(r->mask_state);
    free(r->logits);
    free(r->ids);
    free(r);
}

static void emit_final(pdb_dec_service *s, svc_req *r, pdb_finish why, const char *err) {
    (void)s;
    int last = --r->grp->left == 0;
    pdb_dec_event ev = {.choice = r->choice, .last = last, .token = -1, .finish = why, .prompt_tokens = r->n_ids,
                        .cached_tokens = r->cached, .error = err};
    r->cb(r->user, &ev);
}

/* A choice's buffers: its logits, and what its group's settings need (raw logits for logprobs,
 * the generated tokens for penalties, the mask's state). */
static pdb_status req_buffers(pdb_dec_service *s, svc_req *r) {
    svc_group *g = r->grp;
    size_t V = (size_t)pdb_dec_model_config(s->model)->vocab_size;
    r->logits = malloc(sizeof(float) * V);
    if (g->logprobs) r->raw = malloc(sizeof(float) * V);
    if (g->freq != 0.0f || g->pres != 0.0f) r->gen = malloc(sizeof(int32_t) * (size_t)(r->cap_gen = 64));
    if (g->mask) r->mask_state = calloc(1, g->mask_state_bytes ? g->mask_state_bytes : 1);
    if (!r->logits || (g->logprobs && !r->raw) || (r->cap_gen && !r->gen) || (g->mask && !r->mask_state))
        return pdb_err_set(PDB_NOMEM, "request %llu choice %d buffers", (unsigned long long)r->id, r->choice);
    if (g->mask) g->mask_init(g->mask_user, r->mask_state);
    return PDB_OK;
}

/* Mount the cached prefix, allocate the sequence. Runs on the scheduler thread. */
static pdb_status admit(pdb_dec_service *s, svc_req *r) {
    PDB_TRY(pdb_dec_seq_init(&r->seq, s->model, r->n_ids + r->max_tokens + 1));
    PDB_TRY(req_buffers(s, r));
    r->state = RQ_PREFILL;
    if (!s->store) return PDB_OK;
    int64_t bs = s->opts.block_size, nb = (r->n_ids - 1) / bs; /* keep >= 1 token to compute */
    if (nb <= 0) return PDB_OK;
    uint8_t(*h)[32] = malloc(sizeof(*h) * (size_t)nb);
    if (!h) return pdb_err_set(PDB_NOMEM, "hashes");
    int64_t hit = 0;
    if (pdb_store_hash_chain(pdb_dec_model_fingerprint(s->model), r->ids, nb * bs, bs, h) ||
        pdb_store_longest_prefix(s->store, (const uint8_t(*)[32])h, nb, &hit))
        PDB_WARN("request %llu: store lookup failed: %s", (unsigned long long)r->id, pdb_err_msg());
    int64_t b = 0;
    const pdb_store_layout *lay = pdb_dec_model_layout(s->model);
    uint64_t bb = (pdb_store_block_bytes(s->store) + 63) & ~(uint64_t)63; /* each buffer 64-byte aligned */
    const void *pools[SVC_MOUNT_BATCH][PDB_ARCH_MAX_POOLS];
    void *const *outs[SVC_MOUNT_BATCH];
    for (int i = 0; i < s->mount_batch; i++) {
        pdb_arch_block_pools(lay, bs, s->mount_buf + (uint64_t)i * bb, pools[i]);
        outs[i] = (void *const *)pools[i];
    }
    while (b < hit) { /* several blocks read and verified at once (pool tasks), then put in order */
        int64_t n = hit - b < s->mount_batch ? hit - b : s->mount_batch, ok = 0;
        pdb_status st = pdb_store_load_blocks(s->store, (const uint8_t(*)[32])h + b, b, n, outs, s->pool, &ok);
        for (int64_t i = 0; i < ok; i++) pdb_dec_seq_put_block(&r->seq, b + i, bs, s->mount_buf + (uint64_t)i * bb);
        b += ok;
        if (st) {
            PDB_WARN("request %llu: block %lld not mounted: %s", (unsigned long long)r->id, (long long)b, pdb_err_msg());
            break;
        }
    }
    free(h);
    r->seq.len = r->prefilled = r->cached = b * bs;
    return PDB_OK;
}

/* Write block b of the prompt through the store's block writer, right when the prefill has
 * reached its end (a block's STATE pools are the cache's state at that boundary: prefill chunks
 * never cross a block boundary). The request's stream opens at its first block and closes at the
 * end of the prefill; after a failure the request writes no more blocks. */
static void store_block(pdb_dec_service *s, svc_req *r, int64_t b) {
    int64_t bs = s->opts.block_size, nfull = r->n_ids / bs;
    if (!s->store || r->wfailed || b >= nfull) return;
    if (!r->wst && pdb_store_stream_begin(s->store, r->ids, nfull * bs, &r->wst)) {
        PDB_WARN("request %llu: cannot write blocks: %s", (unsigned long long)r->id, pdb_err_msg());
        r->wfailed = 1;
        return;
    }
    const void *pools[PDB_ARCH_MAX_POOLS];
    pdb_arch_block_pools(pdb_dec_model_layout(s->model), bs, s->block_buf, pools);
    pdb_dec_seq_get_block(&r->seq, b, bs, s->block_buf);
    if (pdb_store_stream_put(r->wst, b, pools)) {
        PDB_WARN("request %llu: block %lld not written: %s", (unsigned long long)r->id, (long long)b, pdb_err_msg());
        pdb_store_stream_abort(r->wst);
        r->wst = NULL;
        r->wfailed = 1;
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->stats.store_blocks_written++;
    pthread_mutex_unlock(&s->mu);
}

static void store_finish(svc_req *r) {
    if (r->wst && pdb_store_stream_finish(r->wst))
        PDB_WARN("request %llu: finishing blocks: %s", (unsigned long long)r->id, pdb_err_msg());
    r->wst = NULL;
}

/* Sample from r->logits, emit the token; returns 1 when the request finished. The order of one
 * step: log-probabilities read the raw logits; then logit_bias, the penalties and the mask change
 * them; then the sampler draws. */
static int sample_and_emit(pdb_dec_service *s, svc_req *r) {
    const pdb_config *c = pdb_dec_model_config(s->model);
    svc_group *g = r->grp;
    int64_t V = c->vocab_size;
    if (r->generated >= r->max_tokens) {
        int met = g->mask && g->mask_done && g->mask_done(g->mask_user, r->mask_state); /* completed by the last token */
        emit_final(s, r, met ? PDB_FINISH_STOP : PDB_FINISH_LENGTH, NULL);
        return 1;
    }
    if (__atomic_load_n(&r->cancel, __ATOMIC_RELAXED)) { emit_final(s, r, PDB_FINISH_CANCELLED, NULL); return 1; }
    if (g->logprobs) memcpy(r->raw, r->logits, sizeof(float) * (size_t)V);
    for (int i = 0; i < g->n_bias; i++) r->logits[g->bias_ids[i]] += g->bias_vals[i];
    if (g->freq != 0.0f || g->pres != 0.0f) pdb_sample_apply_penalties(r->logits, V, r->gen, r->generated, g->freq, g->pres);
    if (g->mask && !g->mask(g->mask_user, r->mask_state, r->logits, V, r->max_tokens - r->generated - 1)) {
        emit_final(s, r, PDB_FINISH_STOP, NULL); /* the constraint is met (or nothing may follow) */
        return 1;
    }
    int32_t tok = pdb_sample_next_token(r->logits, V, &r->sp, &r->rng);
    if (g->mask) g->mask_advance(g->mask_user, r->mask_state, tok);
    if (r->gen) {
        if (r->generated == r->cap_gen) {
            int64_t nc = r->cap_gen * 2;
            int32_t *ng = realloc(r->gen, sizeof *ng * (size_t)nc);
            if (!ng) { emit_final(s, r, PDB_FINISH_ERROR, "out of memory (generated tokens)"); return 1; }
            r->gen = ng;
            r->cap_gen = nc;
        }
        r->gen[r->generated] = tok;
    }
    pdb_dec_event ev = {.choice = r->choice, .token = tok, .finish = PDB_FINISH_NONE, .prompt_tokens = r->n_ids,
                        .cached_tokens = r->cached};
    if (g->logprobs) pdb_sample_logprobs(r->raw, V, tok, g->top_logprobs, &ev.logprob, ev.top_ids, ev.top_lp);
    ev.n_top = g->logprobs ? g->top_logprobs : 0;
    r->generated++;
    pthread_mutex_lock(&s->mu);
    s->stats.generated_tokens++;
    pthread_mutex_unlock(&s->mu);
    if (tok == s->eos && !r->ignore_eos) { emit_final(s, r, PDB_FINISH_STOP, NULL); return 1; }
    if (r->cb(r->user, &ev)) { emit_final(s, r, PDB_FINISH_STOP, NULL); return 1; }
    if (r->generated >= r->max_tokens) {
        int met = g->mask && g->mask_done && g->mask_done(g->mask_user, r->mask_state); /* completed by this last token */
        emit_final(s, r, met ? PDB_FINISH_STOP : PDB_FINISH_LENGTH, NULL);
        return 1;
    }
    r->next_token = tok;
    return 0;
}

/* Choices 1 .. n-1 of r's group, at the end of r's prefill (r->logits hold the prompt's last
 * logits): each a copy of r's sequence and logits with its own seed, sampled at once; an engine
 * without a copy mounts the store's blocks (r wrote them) and prefills the tail instead. Each
 * joins the active list; one that cannot start gets its final (error) event. */
static void svc_fork(pdb_dec_service *s, svc_req *r) {
    svc_group *g = r->grp;
    g->forked = 1;
    size_t V = (size_t)pdb_dec_model_config(s->model)->vocab_size;
    for (int k = 1; k < g->n_choices; k++) {
        svc_req *c = calloc(1, sizeof *c);
        if (c) c->ids = malloc(sizeof(int32_t) * (size_t)r->n_ids);
        if (!c || !c->ids) { /* not started: nothing to report for it, the others still run */
            if (c) free(c);
            PDB_WARN("request %llu: choice %d not started (out of memory)", (unsigned long long)r->id, k);
            continue;
        }
        memcpy(c->ids, r->ids, sizeof(int32_t) * (size_t)r->n_ids);
        c->id = r->id;
        c->choice = k;
        c->grp = g;
        g->refs++;
        g->left++;
        c->n_ids = r->n_ids;
        c->max_tokens = r->max_tokens;
        c->sp = r->sp;
        c->sp.seed = r->sp.seed + (uint64_t)k * 0x9E3779B97F4A7C15ull;
        pdb_sample_rng_init(&c->rng, c->sp.seed);
        c->ignore_eos = r->ignore_eos;
        c->cb = r->cb;
        c->user = r->user;
        c->cancel = __atomic_load_n(&r->cancel, __ATOMIC_RELAXED);
        pdb_status st = pdb_dec_seq_init(&c->seq, s->model, c->n_ids + c->max_tokens + 1);
        if (!st) st = req_buffers(s, c);
        int copied = 0;
        if (!st) {
            pdb_status cs = pdb_dec_seq_copy(&c->seq, &r->seq);
            if (cs == PDB_OK) {
                copied = 1;
                memcpy(c->logits, r->logits, sizeof(float) * V);
                c->prefilled = c->n_ids;
                c->cached = r->cached;
                c->state = RQ_RUNNING;
            } else if (cs == PDB_UNSUPPORTED) {
                pdb_dec_seq_free(&c->seq);
                free(c->logits);
                c->logits = NULL;
                free(c->raw);
                c->raw = NULL;
                free(c->gen);
                c->gen = NULL;
                free(c->mask_state);
                c->mask_state = NULL;
                c->cap_gen = 0;
                st = admit(s, c);
            } else {
                st = cs;
            }
        }
        pthread_mutex_lock(&s->mu);
        s->stats.running++;
        if (!st) {
            if (!copied) s->stats.cached_tokens += (uint64_t)c->cached; /* a copy mounted nothing */
            svc_req **pp = &s->active;
            while (*pp) pp = &(*pp)->next;
            *pp = c;
        }
        pthread_mutex_unlock(&s->mu);
        if (st) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", pdb_err_msg());
            emit_final(s, c, PDB_FINISH_ERROR, msg);
            req_free(c);
            pthread_mutex_lock(&s->mu);
            s->stats.running--;
            pthread_mutex_unlock(&s->mu);
        } else if (copied && sample_and_emit(s, c)) {
            c->state = (rq_state)-1; /* reaped with the others */
        }
    }
}

/* ---- the scheduler's iteration, phase by phase ---- */

/* Wait: until there is work or a stop; 0 on a stop, else 1 with *admitted the queue's oldest
 * request when fewer than max_batch are active (one admission per iteration), else NULL. */
static int svc_next(pdb_dec_service *s, int max_batch, svc_req **admitted) {
    pthread_mutex_lock(&s->mu);
    int n_active = 0;
    for (svc_req *r = s->active; r; r = r->next) n_active++;
    while (!s->stop && !s->active && !s->queue) pthread_cond_wait(&s->cv, &s->mu);
    if (s->stop) { pthread_mutex_unlock(&s->mu); return 0; }
    *admitted = NULL;
    if (s->queue && n_active + s->queue->grp->n_choices <= max_batch) { /* one admission per iteration, all its choices fit */
        *admitted = s->queue;
        s->queue = (*admitted)->next;
        if (!s->queue) s->queue_tail = NULL;
        s->stats.queued--;
        s->stats.running++;
    }
    pthread_mutex_unlock(&s->mu);
    return 1;
}

/* Admit: mount r's cached prefix and append it to the active list, or end it with an error
 * event and free it. */
static void svc_admit(pdb_dec_service *s, svc_req *r) {
    r->next = NULL;
    if (admit(s, r)) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", pdb_err_msg());
        emit_final(s, r, PDB_FINISH_ERROR, msg);
        req_free(r);
        pthread_mutex_lock(&s->mu);
        s->stats.running--;
        pthread_mutex_unlock(&s->mu);
    } else {
        pthread_mutex_lock(&s->mu);
        s->stats.cached_tokens += (uint64_t)r->cached;
        svc_req **pp = &s->active;
        while (*pp) pp = &(*pp)->next;
        *pp = r;
        pthread_mutex_unlock(&s->mu);
    }
}

/* Batch: every RUNNING request's next token + one chunk of the oldest PREFILL one (never past its
 * next full block's end when there is a store) into segs / owners; returns their count. */
static int svc_batch(pdb_dec_service *s, pdb_dec_seg *segs, svc_req **owners) {
    int n = 0;
    svc_req *pre = NULL;
    for (svc_req *r = s->active; r; r = r->next) {
        int cancelled = __atomic_load_n(&r->cancel, __ATOMIC_RELAXED);
        if (cancelled && r->state == RQ_PREFILL) continue;
        if (r->state == RQ_RUNNING && !cancelled) {
            segs[n] = (pdb_dec_seg){&r->seq, &r->next_token, 1, r->logits};
            owners[n++] = r;
        } else if (r->state == RQ_PREFILL && !pre) {
            pre = r;
        }
    }
    if (pre) {
        int64_t left = pre->n_ids - pre->prefilled, take = left < SVC_CHUNK ? left : SVC_CHUNK;
        int64_t bs = s->opts.block_size, next = (pre->prefilled / bs + 1) * bs;
        if (s->store && next <= pre->n_ids && pre->prefilled + take > next) take = next - pre->prefilled;
        segs[n] = (pdb_dec_seg){&pre->seq, pre->ids + pre->prefilled, take, take == left ? pre->logits : NULL};
        owners[n++] = pre;
    }
    return n;
}

/* Advance: after the forward of the batch (st; err its message), each owner's state moves on and
 * its events go out (a finished one is marked for removal, state -1). */
static void svc_advance(pdb_dec_service *s, const pdb_dec_seg *segs, svc_req **owners, int n, pdb_status st, const char *err) {
    for (int i = 0; i < n; i++) {
        svc_req *r = owners[i];
        int done = 0;
        if (st) {
            emit_final(s, r, PDB_FINISH_ERROR, err);
            done = 1;
        } else if (r->state == RQ_PREFILL) {
            r->prefilled += segs[i].n;
            pthread_mutex_lock(&s->mu);
            s->stats.prefill_tokens += (uint64_t)segs[i].n;
            pthread_mutex_unlock(&s->mu);
            if (r->prefilled % s->opts.block_size == 0) store_block(s, r, r->prefilled / s->opts.block_size - 1);
            if (r->prefilled == r->n_ids) {
                store_finish(r);
                r->state = RQ_RUNNING;
                if (r->choice == 0 && r->grp->n_choices > 1 && !r->grp->forked) svc_fork(s, r);
                done = sample_and_emit(s, r);
            }
        } else {
            done = sample_and_emit(s, r);
        }
        if (done) r->state = (rq_state)-1; /* mark for removal */
    }
}

/* Reap: remove finished and cancelled requests from the active list; a cancelled one that has
 * not finished gets its CANCELLED event; all are freed. */
static void svc_reap(pdb_dec_service *s) {
    pthread_mutex_lock(&s->mu);
    svc_req **pp = &s->active, *gone = NULL;
    while (*pp) {
        svc_req *r = *pp;
        if ((int)r->state == -1 || r->cancel) {
            *pp = r->next;
            r->next = gone;
            gone = r;
            s->stats.running--;
        } else {
            pp = &r->next;
        }
    }
    pthread_mutex_unlock(&s->mu);
    while (gone) {
        svc_req *r = gone;
        gone = r->next;
        if ((int)r->state != -1) emit_final(s, r, PDB_FINISH_CANCELLED, NULL);
        req_free(r);
    }
}

static void *svc_main(void *arg) {
    pdb_dec_service *s = arg;
    int max_batch = s->max_batch;
    pdb_dec_seg *segs = s->segs;
    svc_req **owners = s->owners;
    for (;;) {
        svc_req *admitted;
        if (!svc_next(s, max_batch, &admitted)) break;
        if (admitted) svc_admit(s, admitted);
        int n = svc_batch(s, segs, owners);
        pdb_status st = n ? pdb_dec_forward(s->model, segs, n) : PDB_OK;
        char err[512] = "";
        if (st) snprintf(err, sizeof err, "%s", pdb_err_msg());
        svc_advance(s, segs, owners, n, st, err);
        svc_reap(s);
    }
    return NULL;
}

/* What open acquired, released (any of it may be missing after a failed open); frees s. */
static void svc_free(pdb_dec_service *s) {
    free(s->segs);
    free(s->owners);
    if (s->store) pdb_store_close(s->store);
    free(s->block_buf);
    free(s->mount_buf);
    pdb_dec_model_close(s->model);
    pdb_pool_destroy(s->pool);
    free(s);
}

pdb_status pdb_dec_service_open(const pdb_dec_service_opts *o, pdb_dec_service **out) {
    pdb_dec_service *s = calloc(1, sizeof *s);
    if (!s) return pdb_err_set(PDB_NOMEM, "decoder service");
    s->opts = *o;
    if (!s->opts.block_size) s->opts.block_size = 2048;
    if (s->opts.block_size % 128 || s->opts.block_size <= 0) {
        free(s);
        return pdb_err_set(PDB_INVALID, "block size %lld is not a positive multiple of 128", (long long)o->block_size);
    }
    snprintf(s->model_dir, sizeof s->model_dir, "%s", o->model_dir);
    s->opts.model_dir = s->model_dir;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pdb_status st = pdb_pool_create(o->threads, &s->pool);
    if (!st) st = pdb_dec_model_open_flags(o->model_dir, s->pool, o->weights_mmap ? 0 : PDB_DEC_WEIGHTS_DEFAULT, &s->model);
    if (st) goto fail;
    const pdb_config *c = pdb_dec_model_config(s->model);
    if ((st = pdb_arch_check_block_size(c, s->opts.block_size))) goto fail;
    if (!s->opts.max_context || s->opts.max_context > c->max_position_embeddings) s->opts.max_context = c->max_position_embeddings;
    s->eos = (int32_t)c->eos_token_id;
    pdb_store_hash_hex(pdb_dec_model_fingerprint(s->model), s->fp_hex);
    if (o->cache_dir) {
        st = pdb_store_open(o->cache_dir, pdb_dec_model_layout(s->model), pdb_dec_model_fingerprint(s->model),
                            s->opts.block_size, o->cache_max_bytes, &s->store);
        if (st) goto fail;
        s->block_buf = malloc(pdb_store_block_bytes(s->store));
        int nt = pdb_pool_threads(s->pool);
        s->mount_batch = nt < SVC_MOUNT_BATCH ? (nt > 0 ? nt : 1) : SVC_MOUNT_BATCH;
        s->mount_buf = aligned_alloc(64, ((pdb_store_block_bytes(s->store) + 63) & ~(uint64_t)63) * (uint64_t)s->mount_batch);
        if (!s->block_buf || !s->mount_buf) { st = pdb_err_set(PDB_NOMEM, "block buffers"); goto fail; }
    }
    s->max_batch = s->opts.max_batch > 0 ? s->opts.max_batch : 16;
    s->segs = malloc(sizeof(*s->segs) * (size_t)(s->max_batch + 1));
    s->owners = malloc(sizeof(*s->owners) * (size_t)(s->max_batch + 1));
    if (!s->segs || !s->owners) {
        st = pdb_err_set(PDB_NOMEM, "decoder service: the scheduler's batch of %d requests", s->max_batch);
        goto fail;
    }
    if (pthread_create(&s->thread, NULL, svc_main, s)) { st = pdb_err_set(PDB_NOMEM, "scheduler thread"); goto fail; }
    *out = s;
    return PDB_OK;
fail:
    svc_free(s);
    return st;
}

void pdb_dec_service_close(pdb_dec_service *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    svc_req *lists[2] = {s->queue, s->active};
    for (int i = 0; i < 2; i++)
        while (lists[i]) {
            svc_req *r = lists[i];
            lists[i] = r->next;
            emit_final(s, r, PDB_FINISH_CANCELLED, NULL);
            req_free(r);
        }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    svc_free(s);
}

pdb_status pdb_dec_service_submit(pdb_dec_service *s, const pdb_dec_request *q, uint64_t *request_id) {
    const pdb_config *c = pdb_dec_model_config(s->model);
    if (q->n_ids <= 0) return pdb_err_set(PDB_INVALID, "prompt has no tokens");
    if (q->max_tokens < 0) return pdb_err_set(PDB_INVALID, "max_tokens must be >= 0");
    if (q->n_ids + q->max_tokens > s->opts.max_context)
        return pdb_err_set(PDB_TOO_LARGE, "prompt (%lld tokens) + max_tokens (%lld) exceeds the context length %lld",
                           (long long)q->n_ids, (long long)q->max_tokens, (long long)s->opts.max_context);
    for (int64_t i = 0; i < q->n_ids; i++)
        if (q->ids[i] < 0 || q->ids[i] >= c->vocab_size)
            return pdb_err_set(PDB_INVALID, "token id %d at index %lld is outside the vocabulary (0..%lld)", q->ids[i],
                               (long long)i, (long long)c->vocab_size - 1);
    int n_choices = q->n_choices > 0 ? q->n_choices : 1;
    if (n_choices > s->max_batch)
        return pdb_err_set(PDB_INVALID, "%d choices exceed the decoder's batch of %d sequences (--max-batch)", n_choices, s->max_batch);
    if (q->top_logprobs < 0 || q->top_logprobs > PDB_DEC_MAX_TOP || q->n_bias < 0 || (q->mask && !(q->mask_advance && q->mask_init)))
        return pdb_err_set(PDB_INVALID, "request settings out of range (top_logprobs %d, %d logit_bias entries)", q->top_logprobs, q->n_bias);
    for (int i = 0; i < q->n_bias; i++)
        if (q->bias_ids[i] < 0 || q->bias_ids[i] >= c->vocab_size)
            return pdb_err_set(PDB_INVALID, "logit_bias token id %d is outside the vocabulary (0..%lld)", q->bias_ids[i],
                               (long long)c->vocab_size - 1);
    svc_group *g = calloc(1, sizeof *g);
    if (!g) return pdb_err_set(PDB_NOMEM, "request");
    *g = (svc_group){.n_choices = n_choices, .refs = 1, .left = 1, .logprobs = q->logprobs, .top_logprobs = q->logprobs ? q->top_logprobs : 0,
                     .freq = q->frequency_penalty, .pres = q->presence_penalty, .n_bias = q->n_bias, .mask = q->mask,
                     .mask_advance = q->mask_advance, .mask_init = q->mask_init, .mask_done = q->mask_done, .mask_user = q->mask_user,
                     .mask_state_bytes = q->mask_state_bytes};
    if (q->n_bias) {
        g->bias_ids = malloc(sizeof(int32_t) * (size_t)q->n_bias);
        g->bias_vals = malloc(sizeof(float) * (size_t)q->n_bias);
        if (!g->bias_ids || !g->bias_vals) { group_unref(g); return pdb_err_set(PDB_NOMEM, "request"); }
        memcpy(g->bias_ids, q->bias_ids, sizeof(int32_t) * (size_t)q->n_bias);
        memcpy(g->bias_vals, q->bias_vals, sizeof(float) * (size_t)q->n_bias);
    }
    svc_req *r = calloc(1, sizeof *r);
    if (!r || !(r->ids = malloc(sizeof(int32_t) * (size_t)q->n_ids))) {
        free(r);
        group_unref(g);
        return pdb_err_set(PDB_NOMEM, "request");
    }
    r->grp = g;
    memcpy(r->ids, q->ids, sizeof(int32_t) * (size_t)q->n_ids);
    r->n_ids = q->n_ids;
    r->max_tokens = q->max_tokens;
    r->sp = q->sample;
    pdb_sample_rng_init(&r->rng, q->sample.seed);
    r->ignore_eos = q->ignore_eos;
    r->cb = q->on_event;
    r->user = q->user;
    pthread_mutex_lock(&s->mu);
    r->id = ++s->next_id;
    if (s->queue_tail) s->queue_tail->next = r;
    else s->queue = r;
    s->queue_tail = r;
    s->stats.requests++;
    s->stats.queued++;
    s->stats.prompt_tokens += (uint64_t)q->n_ids;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (request_id) *request_id = r->id;
    return PDB_OK;
}

void pdb_dec_service_cancel(pdb_dec_service *s, uint64_t id) {
    pthread_mutex_lock(&s->mu);
    svc_req **pp = &s->queue, *prev = NULL, *found = NULL;
    for (; *pp; prev = *pp, pp = &(*pp)->next)
        if ((*pp)->id == id) { /* still queued: remove now, final event below */
            found = *pp;
            *pp = found->next;
            if (s->queue_tail == found) s->queue_tail = prev;
            s->stats.queued--;
            break;
        }
    if (!found)
        for (svc_req *r = s->active; r; r = r->next)
            if (r->id == id) __atomic_store_n(&r->cancel, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&s->mu);
    if (found) {
        emit_final(s, found, PDB_FINISH_CANCELLED, NULL);
        req_free(found);
    }
}

const pdb_config *pdb_dec_service_config(const pdb_dec_service *s) { return pdb_dec_model_config(s->model); }
const char *pdb_dec_service_fingerprint_hex(const pdb_dec_service *s) { return s->fp_hex; }

void pdb_dec_service_stats(const pdb_dec_service *s, pdb_dec_stats *out) {
    pdb_dec_service *m = (pdb_dec_service *)s;
    pthread_mutex_lock(&m->mu);
    *out = m->stats;
    pthread_mutex_unlock(&m->mu);
    if (m->store) {
        pdb_store_stats ss;
        pdb_store_get_stats(m->store, &ss);
        out->store_hits = ss.hits;
        out->store_misses = ss.misses;
        out->store_corrupt = ss.corrupt_removed;
        out->store_bytes = ss.bytes;
        out->store_evictions = ss.evictions;
        out->store_disk_free_bytes = ss.disk_free_bytes;
    } else {
        out->store_disk_free_bytes = UINT64_MAX;
    }
}
