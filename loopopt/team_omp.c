/* The OpenMP entry points GCC's code calls (loopopt/team.py), linked into each kernel with hidden
   visibility: the kernel's calls bind to these at link time, whatever OpenMP runtime the process has
   loaded, and go to loopopt's team (loopopt/team.c), one per process, loaded before any kernel. */
void lo_team_parallel(void (*fn)(void *), void *data, unsigned requested);
int lo_team_thread_num(void);
int lo_team_num_threads(void);
void lo_team_set_threads(int n);

#define LO_HIDDEN __attribute__((visibility("hidden")))

/* `#pragma omp parallel` (and `parallel for`, schedule(static)): flags (proc_bind) are not read */
LO_HIDDEN void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags) {
    (void) flags;
    lo_team_parallel(fn, data, num_threads);
}

LO_HIDDEN int omp_get_thread_num(void) {
    return lo_team_thread_num();
}

LO_HIDDEN int omp_get_num_threads(void) {
    return lo_team_num_threads();
}

LO_HIDDEN void omp_set_num_threads(int n) {
    lo_team_set_threads(n);
}
