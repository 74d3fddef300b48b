/* loopopt's team of threads for its OpenMP kernels (loopopt/team.py says why and how it is used).

   lo_team_parallel(fn, data, n) runs fn(data) on the calling thread as thread 0 and on n - 1 workers,
   and returns when all are done. Workers are started on demand and kept; one caller's region runs at a
   time (a caller from another thread waits for the team: regions are serialized), and a call from
   inside a region, or for one thread, runs on the caller alone as a team of one. Between regions a
   worker waits: while a plan run holds the team (lo_team_hold) it spins with `pause`, yielding its
   core every LO_YIELD_EVERY spins, until a yield gives the core to another thread (other work wants
   it: from then on in that hold, as outside one); otherwise it spins lo_spin times and then sleeps on a
   futex. The caller waits for its workers the same way. After fork the child has no workers (pthread_atfork). */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LO_MAX_THREADS 256      /* a team's size at most, caller included */
#define LO_YIELD_EVERY 256      /* spins between two sched_yield calls in an unbounded spin */
#define LO_SPIN_FOREVER (-1L)

typedef void (*lo_fn)(void *);

/* The team. The futex word `region` holds a region's number (bits 8 up) and its size less one (bits 0-7),
   so a worker reads both at once: one outside a region's team does not read fn and data, which the
   next region may be writing; one inside it holds that region open (pending) until it is done. */
static struct {
    pthread_mutex_t lock;       /* held by the caller whose region runs */
    atomic_uint region;         /* the last region started (the workers' futex word) */
    atomic_uint pending;        /* workers of the region still running (the caller's futex word) */
    atomic_int sleepers;        /* workers asleep, or about to sleep, on region */
    atomic_int caller_asleep;   /* the caller asleep, or about to sleep, on pending */
    atomic_int holds;           /* plan runs in progress (lo_team_hold) */
    atomic_uint hold_number;    /* holds begun (from none in progress) so far */
    lo_fn fn;
    void *data;
    int workers;                /* workers started */
    unsigned started_at[LO_MAX_THREADS];    /* per worker, the region its caller was starting */
} team = {.lock = PTHREAD_MUTEX_INITIALIZER};

static long lo_spin = 300;                    /* spins before sleeping, outside a hold */
static long lo_held_spin = LO_SPIN_FOREVER;   /* spins before sleeping while held */
static int lo_default_threads = 1;            /* a team's size where omp_set_num_threads was not called */

static __thread int lo_thread_num = 0;
static __thread int lo_team_size = 1;
static __thread int lo_in_region = 0;
static __thread int lo_threads_var = 0;       /* omp_set_num_threads of this thread (0: the default) */
static __thread unsigned lo_gave_way_in = ~0u;   /* the hold in which a yield of this thread's gave its core */

static long futex(atomic_uint *word, int op, unsigned value) {
    return syscall(SYS_futex, (unsigned *) word, op, value, NULL, NULL, 0);
}

static inline void lo_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The spins before sleeping now: while held, without bound, unless this thread's core went to another
   thread at a yield in this hold (then, for the rest of it, as outside one). */
static long spin_limit(void) {
    if (!atomic_load_explicit(&team.holds, memory_order_relaxed))
        return lo_spin;
    return lo_gave_way_in == atomic_load_explicit(&team.hold_number, memory_order_relaxed) ? lo_spin
                                                                                          : lo_held_spin;
}

/* Context switches of the calling thread so far. */
static long switches(void) {
    struct rusage usage;
    getrusage(RUSAGE_THREAD, &usage);
    return usage.ru_nvcsw + usage.ru_nivcsw;
}

enum { SPUN_OUT, CHANGED, RULE_CHANGED };

/* Spin while *word is value, as long as the rule of the moment allows (without bound: yielding the core
   every LO_YIELD_EVERY spins): CHANGED once it differs, SPUN_OUT at the limit, RULE_CHANGED where a hold
   began or ended meanwhile, or where a yield gave the core to another thread (it wants this core: this
   thread spins no longer without bound in this hold). */
static int spin_while(atomic_uint *word, unsigned value) {
    const long limit = spin_limit();
    const int may_give_way = limit == LO_SPIN_FOREVER && lo_spin != LO_SPIN_FOREVER;
    const long before = may_give_way ? switches() : 0;
    for (long i = 1; limit == LO_SPIN_FOREVER || i <= limit; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != value)
            return CHANGED;
        lo_pause();
        if (i % LO_YIELD_EVERY == 0) {
            if (limit == LO_SPIN_FOREVER)
                sched_yield();
            if (may_give_way && switches() != before) {
                lo_gave_way_in = atomic_load_explicit(&team.hold_number, memory_order_relaxed);
                return RULE_CHANGED;
            }
            if (spin_limit() != limit)
                return RULE_CHANGED;
        }
    }
    return SPUN_OUT;
}

static void *worker(void *arg) {
    const unsigned index = (unsigned) (long) arg;
    unsigned seen = team.started_at[index];
    lo_in_region = 1;           /* a region of its own from here runs inline */
    for (;;) {
        unsigned now;
        while ((now = atomic_load_explicit(&team.region, memory_order_acquire)) == seen) {
            int spun = spin_while(&team.region, seen);
            if (spun != SPUN_OUT)
                continue;
            atomic_fetch_add(&team.sleepers, 1);
            futex(&team.region, FUTEX_WAIT_PRIVATE, seen);
            atomic_fetch_sub(&team.sleepers, 1);
        }
        seen = now;
        const int size = (int) (now & 0xff) + 1;
        if (index >= (unsigned) size)
            continue;
        lo_thread_num = (int) index;
        lo_team_size = size;
        team.fn(team.data);
        lo_thread_num = 0;
        lo_team_size = 1;
        if (atomic_fetch_sub(&team.pending, 1) == 1 && atomic_load(&team.caller_asleep))
            futex(&team.pending, FUTEX_WAKE_PRIVATE, 1);
    }
    return NULL;
}

static void start_workers(int count) {
    for (; team.workers < count; team.workers++) {
        pthread_t thread;
        team.started_at[team.workers + 1] = atomic_load_explicit(&team.region, memory_order_relaxed);
        int failed = pthread_create(&thread, NULL, worker, (void *) (long) (team.workers + 1));
        if (failed) {
            fprintf(stderr, "loopopt: cannot start OpenMP worker thread %d: %s\n", team.workers + 1,
                    strerror(failed));
            abort();
        }
        pthread_detach(thread);
    }
}

static void run_alone(lo_fn fn, void *data) {
    int num = lo_thread_num, size = lo_team_size, inside = lo_in_region;
    lo_thread_num = 0;
    lo_team_size = 1;
    lo_in_region = 1;
    fn(data);
    lo_thread_num = num;
    lo_team_size = size;
    lo_in_region = inside;
}

/* The team size of a region asked for no size on this thread (omp_get_max_threads). */
int lo_team_max_threads(void) {
    return lo_threads_var ? lo_threads_var : lo_default_threads;
}

/* omp_set_num_threads: this thread's regions have n threads from now (1 where n < 1). */
void lo_team_set_threads(int n) {
    lo_threads_var = n > 0 ? n : 1;
}

int lo_team_thread_num(void) {
    return lo_thread_num;
}

int lo_team_num_threads(void) {
    return lo_team_size;
}

/* GOMP_parallel: fn(data) on `requested` threads (0: lo_team_max_threads), the caller thread 0. */
void lo_team_parallel(lo_fn fn, void *data, unsigned requested) {
    const unsigned wanted = requested ? requested : (unsigned) lo_team_max_threads();
    const int size = wanted < LO_MAX_THREADS ? (int) wanted : LO_MAX_THREADS;
    if (size <= 1 || lo_in_region) {
        run_alone(fn, data);
        return;
    }
    pthread_mutex_lock(&team.lock);
    start_workers(size - 1);
    team.fn = fn;
    team.data = data;
    atomic_store(&team.pending, (unsigned) (size - 1));
    unsigned number = (atomic_load_explicit(&team.region, memory_order_relaxed) >> 8) + 1;
    atomic_store(&team.region, (number << 8) | (unsigned) (size - 1));
    if (atomic_load(&team.sleepers))
        futex(&team.region, FUTEX_WAKE_PRIVATE, INT_MAX);
    lo_team_size = size;
    lo_in_region = 1;
    fn(data);
    lo_in_region = 0;
    lo_team_size = 1;
    unsigned left;
    while ((left = atomic_load_explicit(&team.pending, memory_order_acquire)) != 0) {
        if (spin_while(&team.pending, left) != SPUN_OUT)
            continue;
        atomic_store(&team.caller_asleep, 1);
        futex(&team.pending, FUTEX_WAIT_PRIVATE, left);
        atomic_store(&team.caller_asleep, 0);
    }
    pthread_mutex_unlock(&team.lock);
}

/* A plan run begins (1) or ends (-1): while one runs, waits spin without bound; its start wakes
   sleeping workers, so that they spin already when its first region comes. */
void lo_team_hold(int change) {
    if (atomic_fetch_add(&team.holds, change) != 0 || change < 0)
        return;
    atomic_fetch_add(&team.hold_number, 1);
    if (atomic_load(&team.sleepers))
        futex(&team.region, FUTEX_WAKE_PRIVATE, INT_MAX);
}

/* How waits end (-1: spin without bound), outside a hold and while held; a region's default size. */
void lo_team_configure(long spin, long held_spin, int default_threads) {
    lo_spin = spin;
    lo_held_spin = held_spin;
    lo_default_threads = default_threads;
}

/* The number of workers started (the tests read it). */
int lo_team_workers(void) {
    return team.workers;
}

static void before_fork(void) {
    pthread_mutex_lock(&team.lock);
}

static void after_fork_parent(void) {
    pthread_mutex_unlock(&team.lock);
}

/* The child has the forking thread alone: no workers; the next region starts its own. */
static void after_fork_child(void) {
    team.workers = 0;
    atomic_store(&team.sleepers, 0);
    atomic_store(&team.caller_asleep, 0);
    atomic_store(&team.holds, 0);
    pthread_mutex_unlock(&team.lock);
}

__attribute__((constructor)) static void register_fork_handlers(void) {
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
