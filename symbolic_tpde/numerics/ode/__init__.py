"""Time integration: Runge-Kutta tableaus, the one `integrate` loop, and the numeric-matrix ODE backend."""
