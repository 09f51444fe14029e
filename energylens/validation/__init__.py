"""Loading published measurements to validate and calibrate EnergyLens predictions."""
