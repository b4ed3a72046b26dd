package wall

// TaskReserve is how many of a wall's tasks its entry keeps for itself (at
// most half the wall's limit; the launcher's TE_TASK_RESERVE): the Go
// runtime's threads, about ten, with room to spare. Where the wall's cgroup
// holds its tasks, the app starts in a folder of the group whose pids.max
// is the wall's less the reserve (taskFence); elsewhere the app's soft
// RLIMIT_NPROC is.
const TaskReserve = 32
