"""Fieldscope's desktop application and command line.

The GUI process never imports TensorFlow: the sampler runs in its own spawned
engine process (TensorFlow and Mesa's software OpenGL crash when they share a
process, and a TensorFlow kernel abort must not take the GUI down).
"""
