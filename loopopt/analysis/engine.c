/* Trace visitors; the loop nest of the schedule replaces the NEST marker twice. */
#include <string.h>

typedef struct { long long nitems; long long cap; long long now; long long seen;
                 long long *last; long long *owner; int *tree; long long *hist; } stack_state;
typedef struct { long long sets; long long ways; long long *tags; long long *stamps;
                 long long clock; long long *misses; } sa_cache;
typedef struct { int ncaches; sa_cache *caches; } sa_state;

/* Olken stack distances: a Fenwick tree over access times marks the last access of
   every item; the distance of an access is the number of marks after the item's
   previous one. When time reaches cap, live times are renumbered 1..seen. */
static void compact(stack_state *s) {
    long long t2 = 0;
    for (long long t = 1; t <= s->now; t++) {
        long long item = s->owner[t];
        if (item >= 0 && s->last[item] == t) {
            t2++;
            s->last[item] = t2;
            s->owner[t2] = item;
        }
    }
    for (long long t = t2 + 1; t <= s->cap; t++) s->owner[t] = -1;
    memset(s->tree, 0, sizeof(int) * (s->cap + 1));
    for (long long t = 1; t <= s->cap; t++) {      /* linear-time Fenwick build */
        s->tree[t] += t <= t2;
        long long parent = t + (t & -t);
        if (parent <= s->cap) s->tree[parent] += s->tree[t];
    }
    s->now = t2;
}

static inline void stack_visit(stack_state *s, int tensor, long long item) {
    long long *hist = s->hist + (long long)tensor * (s->nitems + 1);
    long long prev = s->last[item];
    if (prev == s->now && prev > 0) { hist[0]++; return; }  /* touched just before: nothing moves */
    if (s->now == s->cap) { compact(s); prev = s->last[item]; }
    long long t = s->now + 1;
    if (prev > 0) {
        /* marks in (prev, now], and moving prev's mark to t: both walks stop where the
           two Fenwick paths meet, so the cost grows with log(t - prev), not log(cap) */
        long long distance = 0, i = s->now, j = prev;
        while (i != j) {
            if (i > j) { distance += s->tree[i]; i -= i & -i; }
            else { distance -= s->tree[j]; j -= j & -j; }
        }
        hist[distance]++;
        for (i = prev, j = t; i != j;) {      /* cap is a power of two: the paths meet by cap */
            if (i < j) { s->tree[i]--; i += i & -i; }
            else { s->tree[j]++; j += j & -j; }
        }
        s->owner[prev] = -1;
    } else {
        hist[s->nitems]++;                           /* cold */
        s->seen++;
        for (long long i = t; i <= s->cap; i += i & -i) s->tree[i]++;
    }
    s->now = t;
    s->last[item] = t;
    s->owner[t] = item;
}

/* Set-associative LRU caches, all fed by the same line trace. */
static inline void sa_visit(sa_state *st, int tensor, long long line) {
    for (int c = 0; c < st->ncaches; c++) {
        sa_cache *k = st->caches + c;
        long long set = line % k->sets;
        long long *tags = k->tags + set * k->ways, *stamps = k->stamps + set * k->ways;
        long long victim = 0;
        k->clock++;
        for (long long w = 0; w < k->ways; w++) {
            if (tags[w] == line) { stamps[w] = k->clock; goto hit; }
            if (stamps[w] < stamps[victim]) victim = w;
        }
        k->misses[tensor]++;
        tags[victim] = line;
        stamps[victim] = k->clock;
    hit:;
    }
}

void stack_run(stack_state *state) {
#define VISIT stack_visit
/*NEST*/
#undef VISIT
}

void sa_run(sa_state *state) {
#define VISIT sa_visit
/*NEST*/
#undef VISIT
}
