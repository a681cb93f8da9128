"""LEAD's maths (arXiv 2605.10878): the symmetric efficiency reward and the Potential-Scaled-Instability controller."""
