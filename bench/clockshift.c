/* The wall clock of a process, stepped while it runs: the fault campaign's clock jumps (bench/chaos_faults.py).
 *
 * Loaded with LD_PRELOAD, it adds a scheduled offset to every reading of the real-time clock (clock_gettime of
 * CLOCK_REALTIME and its coarse form, gettimeofday, time): Python's time.time and datetime.now, the JVM's
 * System.currentTimeMillis, Rust's SystemTime. CLOCK_MONOTONIC and every timer (sleep, poll, select) are left
 * alone, as a real clock step (NTP, a VM resumed) leaves them: deadlines and timeouts keep their length.
 *
 * CLOCKSHIFT="AT:SECONDS[,AT:SECONDS...]": from the moment CLOCK_MONOTONIC (one clock for every process of the
 * machine) reads AT seconds, the real-time clock reads SECONDS ahead (negative: behind), until the next step.
 * Built by bench/chaos_faults.py with the machine's C compiler: cc -shared -fPIC -O2 -o clockshift.so clockshift.c
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

#define MAX_STEPS 16

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static double step_at[MAX_STEPS];
static long long step_ns[MAX_STEPS];
static int steps;

static void load(void) __attribute__((constructor));

static void load(void) {
    real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    const char *spec = getenv("CLOCKSHIFT");
    while (spec && *spec && steps < MAX_STEPS) {
        char *end;
        double at = strtod(spec, &end);
        if (*end != ':') break;
        double seconds = strtod(end + 1, &end);
        step_at[steps] = at;
        step_ns[steps] = (long long)(seconds * 1e9);
        steps++;
        if (*end != ',') break;
        spec = end + 1;
    }
}

static long long offset_ns(void) {
    struct timespec now;
    if (!steps || real_clock_gettime(CLOCK_MONOTONIC, &now) != 0) return 0;
    double t = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
    long long offset = 0;
    for (int i = 0; i < steps; i++)
        if (t >= step_at[i]) offset = step_ns[i];
    return offset;
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
    ts->tv_sec = (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000L;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    if (!real_clock_gettime) load();
    int rc = real_clock_gettime(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
