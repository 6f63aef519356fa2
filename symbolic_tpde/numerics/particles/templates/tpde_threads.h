/* Run worker(arg) on `threads` POSIX threads (at most `units`, the pieces of work, and at most 64): the calling
 * thread works too, and a thread that cannot be started only costs time.  Returns the number that ran. */
static int tpde_run_threads(void *(*worker)(void *), void *arg, int threads, long units) {
    if (threads > 64) threads = 64;
    if (threads > units) threads = (int)units;
    pthread_t tid[64];
    int started = 0;
    for (int t = 1; t < threads; ++t) {
        if (pthread_create(&tid[started], NULL, worker, arg) != 0) break;
        ++started;
    }
    worker(arg);
    for (int t = 0; t < started; ++t) pthread_join(tid[t], NULL);
    return started + 1;
}
